"""The stand-in vLLM (tests/doubles/vllm_standin) in-process: its modules, and an engine as `vllm serve` starts it.

    cli, speed_model = standin.modules("vllm.entrypoints.cli", "vllm.entrypoints.speed_model")
    handler = cli.handler_for(standin.engine("laguna-s-2.1"))   # a DFlash engine at k=6

The stand-in's directory is on sys.path for the import only: the package ``vllm`` it imports
finds its further modules by itself.
"""

import importlib
import os
import shutil
import sys

from helpers import DOUBLES, STANDIN_DFLASH
from helpers.constants import MAX_MODEL_LEN

STANDIN = os.path.join(DOUBLES, "vllm_standin")
LOADER = os.path.join("vllm", "model_executor", "models", "laguna_dflash.py")


def modules(*names):
    """The stand-in's modules of those dotted names, in their order (a list)."""
    sys.path.insert(0, STANDIN)
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        sys.path.remove(STANDIN)


def dflash_spec(k=6, model="/d"):
    """The --speculative-config of a DFlash draft at k speculative tokens."""
    return {"method": "dflash", "model": model, "num_speculative_tokens": k}


def engine(name, k=6, max_model_len=MAX_MODEL_LEN, **options):
    """The stand-in's engine serving ``name``, drafting with DFlash at k tokens (k=0: no speculative config);
    ``options`` go to cli.Engine as they are (kv_cache_memory_bytes)."""
    cli, = modules("vllm.entrypoints.cli")
    return cli.Engine(name, dflash_spec(k) if k else None, max_model_len, **options)


def patched_copy(package):
    """Copy the stand-in to the directory ``package`` with its laguna_dflash.py patched (laguna.spark's
    dflash_patch): the stand-in ships the unguarded loader and, like vLLM, dies loading the W4A16 draft."""
    from ansible_collections.laguna.spark.plugins.module_utils import dflash_patch  # pylint: disable=import-outside-toplevel

    shutil.copytree(STANDIN, package)
    loader = os.path.join(package, LOADER)
    with open(loader) as handle:
        patched = dflash_patch.patch_source(handle.read())[0]
    with open(loader, "w") as handle:
        handle.write(patched)
    return package


# --- variants of the stand-in's laguna_dflash.py (tests/unit/test_laguna_dflash_patch.py,
# tests/integration/test_vllm_patch_role.py): one source, each variant an edit of it

STANDIN_IF = "            if self.quant_config is not None and (\n"
CACHE_SCALE_CALL = "                scale_name := self.quant_config.get_cache_scale(name)\n"


def loader_with(old, new, source=None):
    """``source`` (by default the stand-in's laguna_dflash.py) with ``old``, which it must hold once, made ``new``."""
    if source is None:
        with open(STANDIN_DFLASH, encoding="utf-8") as handle:
            source = handle.read()
    assert source.count(old) == 1, old
    return source.replace(old, new)


def guarded_loader():
    """laguna_dflash.py as an upstream fix might guard it: the hasattr guard before the get_cache_scale call, in
    another style than the patch's (one operand a line, single quotes)."""
    return loader_with(STANDIN_IF + CACHE_SCALE_CALL, "            if (\n"
                       "                self.quant_config is not None\n"
                       "                and hasattr(self.quant_config, 'get_cache_scale')\n"
                       "                and (scale_name := self.quant_config.get_cache_scale(name))\n")


def drifted_loader():
    """laguna_dflash.py as a refactor might leave it: load_weights calls no get_cache_scale (the KV-cache scales'
    names come from maybe_remap_kv_scale_name), so the patch finds nothing it knows to guard."""
    remapped = loader_with(STANDIN_IF + CACHE_SCALE_CALL + "            ):\n",
                           "            scale_name = maybe_remap_kv_scale_name(name, params_dict)\n"
                           "            if scale_name is not None and scale_name != name:\n")
    return loader_with("\ndef default_weight_loader(", "\ndef maybe_remap_kv_scale_name(name, params_dict):\n"
                       "    return None\n\n\ndef default_weight_loader(", remapped)
