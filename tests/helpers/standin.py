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

from helpers import DOUBLES
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

