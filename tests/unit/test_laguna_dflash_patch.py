import importlib.util
import os
import shutil

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import dflash_patch
from ansible_collections.laguna.spark.plugins.modules import laguna_dflash_patch

from helpers import FIXTURES, STANDIN_DFLASH


def load(path):
    spec = importlib.util.spec_from_file_location("laguna_dflash_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class NoCacheScale:
    """A W4A16-style quant config: no get_cache_scale."""


WEIGHTS = [("layers.0.self_attn.qkv_proj.weight", b"w"), ("layers.0.self_attn.attn.k_scale", b"s")]


@pytest.fixture
def venv(tmp_path):
    models = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    shutil.copy(STANDIN_DFLASH, models / "laguna_dflash.py")
    return tmp_path / "venv", models / "laguna_dflash.py"


def test_unguarded_code_fails_with_w4a16_config_then_loads_once_patched(venv, run_module):
    root, target = venv
    with pytest.raises(AttributeError, match="get_cache_scale"):
        load(str(target)).DFlashLagunaModel(NoCacheScale()).load_weights(WEIGHTS)

    result = run_module(laguna_dflash_patch, {"venv": str(root)})

    assert result["changed"] and result["patch_state"] == "patched"
    assert result["path"] == str(target)
    loaded = load(str(target)).DFlashLagunaModel(NoCacheScale()).load_weights(WEIGHTS)
    assert "layers.0.self_attn.qkv_proj.weight" in loaded


def test_patch_changes_exactly_one_line():
    before = open(STANDIN_DFLASH).read()
    after, state = dflash_patch.patch_source(before)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert state == "patched"
    assert len(before.splitlines()) == len(after.splitlines())
    assert changed == [(
        '            if self.quant_config is not None and (',
        '            if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (',
    )]


def test_second_run_is_unchanged_and_backup_kept(venv, run_module):
    root, target = venv
    first = run_module(laguna_dflash_patch, {"venv": str(root)})
    second = run_module(laguna_dflash_patch, {"venv": str(root)})
    assert first["changed"] and os.path.exists(first["backup_file"])
    assert open(first["backup_file"]).read() == open(STANDIN_DFLASH).read()
    assert not second["changed"] and second["patch_state"] == "already_patched"


def test_check_mode_reports_diff_and_writes_nothing(venv, run_module):
    root, target = venv
    result = run_module(laguna_dflash_patch, {"path": str(target)}, check_mode=True, diff=True)
    assert result["changed"]
    assert 'hasattr(self.quant_config, "get_cache_scale")' in result["diff"]["after"]
    assert result["diff"]["before"] == open(STANDIN_DFLASH).read()
    assert open(target).read() == open(STANDIN_DFLASH).read()
    assert "backup_file" not in result


def test_no_backup_when_disabled(venv, run_module):
    root, target = venv
    result = run_module(laguna_dflash_patch, {"path": str(target), "backup": False})
    assert result["changed"] and "backup_file" not in result
    assert os.listdir(target.parent) == ["laguna_dflash.py"]


def test_already_guarded_upstream_is_left_alone(tmp_path, run_module):
    target = tmp_path / "laguna_dflash.py"
    shutil.copy(os.path.join(FIXTURES, "dflash", "guarded.py"), target)
    result = run_module(laguna_dflash_patch, {"path": str(target)})
    assert not result["changed"] and result["patch_state"] == "already_patched"


def test_drifted_code_fails_clearly_and_changes_nothing(tmp_path, run_module):
    target = tmp_path / "laguna_dflash.py"
    shutil.copy(os.path.join(FIXTURES, "dflash", "drifted.py"), target)
    result = run_module(laguna_dflash_patch, {"path": str(target)})
    assert result.failed
    assert "version drift" in result["msg"] and "DFlashLagunaModel.load_weights" in result["msg"]
    assert open(target).read() == open(os.path.join(FIXTURES, "dflash", "drifted.py")).read()


def test_missing_file_and_missing_venv_fail_clearly(tmp_path, run_module):
    result = run_module(laguna_dflash_patch, {"path": str(tmp_path / "nope.py")})
    assert result.failed and "does not exist" in result["msg"]
    result = run_module(laguna_dflash_patch, {"venv": str(tmp_path)})
    assert result.failed and "laguna_dflash.py" in result["msg"] and "venv" in result["msg"]


def test_guard_outside_the_method_does_not_count():
    source = open(STANDIN_DFLASH).read() + (
        '\n\ndef elsewhere(self):\n    return hasattr(self.quant_config, "get_cache_scale")\n')
    state = dflash_patch.patch_source(source)[1]
    assert state == "patched"


def test_missing_class_or_method_is_reported():
    source = open(STANDIN_DFLASH).read()
    with pytest.raises(dflash_patch.PatchError, match="no class Nope"):
        dflash_patch.patch_source(source, class_name="Nope")
    with pytest.raises(dflash_patch.PatchError, match="has no method nope"):
        dflash_patch.patch_source(source, method_name="nope")


def test_single_line_condition_is_patched_too():
    source = (
        "class DFlashLagunaModel:\n"
        "    def load_weights(self, weights):\n"
        "        for name, w in weights:\n"
        "            if self.quant_config is not None and (scale_name := self.quant_config.get_cache_scale(name)):\n"
        "                pass\n"
    )
    after, state = dflash_patch.patch_source(source)
    assert state == "patched"
    assert 'is not None and hasattr(self.quant_config, "get_cache_scale") and (scale_name :=' in after
    assert dflash_patch.patch_source(after) == (after, "already_patched")
