"""The staging role on a single (head) node: download once, never again; clear failures."""
import json
import os
import shutil

import pytest

from conftest import DOUBLES



@pytest.fixture
def hub(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(os.path.join(DOUBLES, "bin", "hf"), venv / "bin" / "hf")
    catalogue = tmp_path / "hub.json"
    log = tmp_path / "downloads.log"

    def write(target_shards):
        catalogue.write_text(json.dumps({
            "poolside/Laguna-S-2.1-FP8": {"shards": target_shards, "shard_bytes": 1024},
            "poolside/Laguna-S-2.1-DFlash-W4A16": {"shards": 1, "shard_bytes": 512}}))

    write(24)
    return {
        "write": write,
        "log": log,
        "vars": {
            "laguna_venv": str(venv),
            "laguna_model_path": str(tmp_path / "models" / "target"),
            "laguna_draft_path": str(tmp_path / "models" / "draft"),
            "staging_hf_environment": {"LAGUNA_STANDIN_HUB": str(catalogue), "LAGUNA_STANDIN_LOG": str(log)},
            "staging_download_poll": 1,
        },
    }


def test_downloads_once_then_never_again(runner, hub, tmp_path):
    first = runner.include_role("staging", hub["vars"])
    assert first.rc == 0, first.text
    assert "target: 24 shard(s)" in first.flat and "draft: 1 shard(s)" in first.flat
    assert len(hub["log"].read_text().splitlines()) == 2
    assert not list((tmp_path / "models").rglob("*.incomplete"))

    second = runner.include_role("staging", hub["vars"])
    assert second.rc == 0 and second.stats["changed"].get("localhost", 0) == 0
    assert len(hub["log"].read_text().splitlines()) == 2


def test_an_interrupted_download_is_resumed(runner, hub, tmp_path):
    assert runner.include_role("staging", hub["vars"]).rc == 0
    target = tmp_path / "models" / "target"
    (target / "model-00007-of-00024.safetensors").unlink()
    partial = target / ".cache" / "huggingface" / "download"
    (partial / "model-00007-of-00024.safetensors.incomplete").write_bytes(b"x")
    again = runner.include_role("staging", hub["vars"])
    assert again.rc == 0, again.text
    assert again.stats["changed"]["localhost"] >= 1
    assert len(hub["log"].read_text().splitlines()) == 3  # the target once more, not the draft
    assert (target / "model-00007-of-00024.safetensors").exists()


def test_a_checkpoint_with_the_wrong_shard_count_fails(runner, hub):
    hub["write"](23)
    result = runner.include_role("staging", hub["vars"])
    assert result.rc != 0
    assert "23 of 24 shards" in result.flat


def test_check_mode_downloads_nothing(runner, hub, tmp_path):
    result = runner.include_role("staging", hub["vars"], cmdline="--check")
    assert result.rc == 0, result.text
    assert result.stats["changed"]["localhost"] >= 2
    assert not hub["log"].exists() and not (tmp_path / "models").exists()
