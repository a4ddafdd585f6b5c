"""laguna_dflash_patch on the real laguna_dflash.py of vLLM 0.25.1.

The file comes from the conformance venv (fixture ``vllm_src``) and is patched
in a temporary directory with the module_utils function the module uses:
patched once, unchanged by a second run, still compiling, and, read with
``ast`` here (not with the patch's own code), the condition of the ``if``
that holds the real ``self.quant_config.get_cache_scale(...)`` call has
``hasattr(self.quant_config, "get_cache_scale")`` as an earlier operand of
its ``and``, so it is evaluated first. Then the patched method itself runs in
the conformance venv with vLLM's W4A16 quant config class, which has no
get_cache_scale: unpatched it raises AttributeError, patched it loads.
"""
import ast
import json
import os
import shutil
import subprocess

import pytest

from helpers.collection import collections_path

collections_path()
from ansible_collections.laguna.spark.plugins.module_utils import dflash_patch  # noqa: E402

RELATIVE = os.path.join("model_executor", "models", "laguna_dflash.py")
GUARD = ast.dump(ast.parse('hasattr(self.quant_config, "get_cache_scale")', mode="eval").body)


def is_get_cache_scale_call(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get_cache_scale"
            and ast.dump(node.func.value) == ast.dump(ast.parse("self.quant_config", mode="eval").body))


def load_weights_of(source):
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DFlashLagunaModel")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")


def guarding_if(source):
    """(the if around the one get_cache_scale call of load_weights, that call)."""
    method = load_weights_of(source)
    calls = [n for n in ast.walk(method) if is_get_cache_scale_call(n)]
    assert len(calls) == 1, "vLLM 0.25.1's load_weights calls get_cache_scale once, found %d" % len(calls)
    ifs = [n for n in ast.walk(method) if isinstance(n, ast.If) and any(c is calls[0] for c in ast.walk(n.test))]
    assert len(ifs) == 1
    return ifs[0], calls[0]


def guard_before_call(source):
    """Is the guard an operand of the if test's `and` before the operand that makes the call?"""
    node, call = guarding_if(source)
    test = node.test
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return False
    call_at = next(i for i, v in enumerate(test.values) if any(c is call for c in ast.walk(v)))
    return GUARD in [ast.dump(v) for v in test.values[:call_at]]


@pytest.fixture(scope="module")
def real_loader(vllm_src, tmp_path_factory):
    """A copy of vLLM 0.25.1's laguna_dflash.py in a temporary directory, and its text."""
    path = tmp_path_factory.mktemp("dflash") / "laguna_dflash.py"
    shutil.copy(os.path.join(vllm_src, RELATIVE), path)
    return path, path.read_text()


@pytest.fixture(scope="module")
def patched(real_loader):
    path, original = real_loader
    after, state = dflash_patch.patch_source(original)
    assert state == "patched"
    path.write_text(after)
    return path, original, after


def test_the_real_loader_is_unguarded(real_loader):
    _path, original = real_loader
    node, _call = guarding_if(original)
    assert not guard_before_call(original), ast.unparse(node.test)
    assert GUARD not in [ast.dump(n) for n in ast.walk(ast.parse(original))]


def test_patched_once_then_idempotent(patched):
    path, original, after = patched
    assert after != original
    assert dflash_patch.patch_source(path.read_text()) == (after, "already_patched")
    assert path.read_text() == after


def test_patch_is_the_recipe_one_line_edit(patched):
    _path, original, after = patched
    changed = [(a, b) for a, b in zip(original.splitlines(), after.splitlines()) if a != b]
    assert len(original.splitlines()) == len(after.splitlines())
    assert changed == [(
        "            if self.quant_config is not None and (",
        '            if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (',
    )]


def test_patched_file_compiles(patched):
    path, _original, after = patched
    compile(after, str(path), "exec")


def test_the_real_condition_is_guarded_before_the_call(patched):
    _path, _original, after = patched
    node, call = guarding_if(after)
    assert guard_before_call(after), ast.unparse(node.test)
    # The call is still the walrus operand whose name the body uses.
    walrus = [n for n in ast.walk(node.test) if isinstance(n, ast.NamedExpr) and n.value is call]
    assert len(walrus) == 1 and walrus[0].target.id == "scale_name"


def test_guard_quoted_in_a_comment_of_the_real_file_does_not_count(real_loader):
    _path, original = real_loader
    line = "            if self.quant_config is not None and (\n"
    assert original.count(line) == 1
    quoted = original.replace(line, '            # hasattr(self.quant_config, "get_cache_scale")\n' + line)
    after, state = dflash_patch.patch_source(quoted)
    assert state == "patched" and guard_before_call(after)


RUN_PATCHED = r'''
import importlib.util, json, sys, types
import torch
import vllm
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
    CompressedTensorsConfig)
assert vllm.__version__.startswith("0.25.1"), vllm.__version__
path = sys.argv[1]
# Loaded inside vLLM's models package, so its relative imports resolve.
spec = importlib.util.spec_from_file_location("vllm.model_executor.models.laguna_dflash_under_test", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
params = {"layers.0.self_attn.qkv_proj.weight": torch.nn.Parameter(torch.zeros(2), requires_grad=False),
          "layers.0.self_attn.attn.k_scale": torch.nn.Parameter(torch.zeros(()), requires_grad=False)}
model = types.SimpleNamespace(quant_config=object.__new__(CompressedTensorsConfig),
                              named_parameters=lambda: params.items())
weights = [("layers.0.self_attn.qkv_proj.weight", torch.ones(2)),
           ("layers.0.self_attn.k_scale", torch.tensor(0.5))]
report = {"config_has_get_cache_scale": hasattr(CompressedTensorsConfig, "get_cache_scale")}
try:
    report["loaded"] = sorted(mod.DFlashLagunaModel.load_weights(model, weights))
    report["values"] = {k: v.tolist() for k, v in params.items()}
except AttributeError as exc:
    report["error"] = str(exc)
print(json.dumps(report))
'''


def run_loader(vllm_python, path):
    proc = subprocess.run([vllm_python, "-c", RUN_PATCHED, str(path)], capture_output=True, text=True,
                          timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1])


def test_the_real_method_loads_a_w4a16_config_only_once_patched(vllm_python, real_loader, patched, tmp_path):
    original_copy = tmp_path / "laguna_dflash.py"
    original_copy.write_text(real_loader[1])
    before = run_loader(vllm_python, original_copy)
    assert before["config_has_get_cache_scale"] is False
    assert "get_cache_scale" in before["error"]

    after = run_loader(vllm_python, patched[0])
    assert "error" not in after, after
    # The weight loads, and the KV scale takes vLLM's generic remapping path.
    assert after["loaded"] == ["layers.0.self_attn.attn.k_scale", "layers.0.self_attn.qkv_proj.weight"]
    assert after["values"] == {"layers.0.self_attn.qkv_proj.weight": [1.0, 1.0], "layers.0.self_attn.attn.k_scale": 0.5}
