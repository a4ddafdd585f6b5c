"""The vllm_patch role: check mode with diff, apply, idempotence, drift."""
import os
import shutil

from helpers import STANDIN_DFLASH
from helpers.standin import drifted_loader


def test_check_diff_then_apply_then_nothing_to_do(runner, tmp_path):
    target = tmp_path / "laguna_dflash.py"
    shutil.copy(STANDIN_DFLASH, target)
    vars_ = {"vllm_patch_path": str(target)}

    check = runner.include_role("vllm_patch", vars_, cmdline="--check --diff")
    assert check.rc == 0, check.text
    assert check.stats["changed"]["localhost"] == 1
    assert '+            if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (' in check.text
    assert target.read_text() == open(STANDIN_DFLASH).read()

    apply = runner.include_role("vllm_patch", vars_)
    assert apply.rc == 0 and apply.stats["changed"]["localhost"] == 1
    assert 'hasattr(self.quant_config, "get_cache_scale")' in target.read_text()
    assert len([f for f in os.listdir(tmp_path) if f.startswith("laguna_dflash.py.") and f.endswith("~")]) == 1

    again = runner.include_role("vllm_patch", vars_)
    assert again.rc == 0 and again.stats["changed"].get("localhost", 0) == 0


def test_drifted_vllm_fails_clearly(runner, tmp_path):
    target = tmp_path / "laguna_dflash.py"
    target.write_text(drifted_loader())
    result = runner.include_role("vllm_patch", {"vllm_patch_path": str(target)})
    assert result.rc != 0
    assert "version drift" in result.text


def test_missing_venv_fails_clearly(runner, tmp_path):
    result = runner.include_role("vllm_patch", {"laguna_venv": str(tmp_path / "no-venv")})
    assert result.rc != 0
    assert "is this the venv vLLM is installed in" in result.text
