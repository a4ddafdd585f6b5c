from ansible_collections.laguna.spark.plugins.module_utils import model_stage
from ansible_collections.laguna.spark.plugins.modules import model_stage_info


def checkpoint(path, shards=24, size=10):
    path.mkdir(parents=True, exist_ok=True)
    for i in range(1, shards + 1):
        (path / ("model-%05d-of-%05d.safetensors" % (i, shards))).write_bytes(b"x" * size)
    (path / "config.json").write_text("{}")
    cache = path / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "model-00001-of-00024.safetensors.metadata").write_text("etag")
    return path


def test_complete_checkpoint(tmp_path, run_module):
    path = checkpoint(tmp_path / "m")
    result = run_module(model_stage_info, {"path": str(path), "expected_shards": 24})
    assert result["complete"] and result["problems"] == []
    assert result["shard_count"] == 24 and not result["changed"]
    assert ".cache/huggingface/download/model-00001-of-00024.safetensors.metadata" not in result["manifest"]
    assert result["total_bytes"] == 24 * 10 + 2


def test_missing_shard_and_incomplete_download(tmp_path, run_module):
    path = checkpoint(tmp_path / "m")
    (path / "model-00007-of-00024.safetensors").unlink()
    (path / ".cache" / "huggingface" / "download" / "model-00007-of-00024.safetensors.incomplete").write_bytes(b"x")
    result = run_module(model_stage_info, {"path": str(path), "expected_shards": 24})
    assert not result["complete"]
    assert "23 of 24 shards" in result["problems"]
    assert result["incomplete"] == [".cache/huggingface/download/model-00007-of-00024.safetensors.incomplete"]


def test_missing_directory(tmp_path, run_module):
    result = run_module(model_stage_info, {"path": str(tmp_path / "nope"), "expected_shards": 24})
    assert not result["complete"] and not result["exists"]
    assert result["problems"] == ["directory is missing"]


def test_reference_catches_a_truncated_inplace_copy(tmp_path, run_module):
    head = run_module(model_stage_info, {"path": str(checkpoint(tmp_path / "head")), "expected_shards": 24})
    worker = checkpoint(tmp_path / "worker")
    (worker / "model-00003-of-00024.safetensors").write_bytes(b"x" * 4)
    (worker / "config.json").unlink()
    result = run_module(model_stage_info, {"path": str(worker), "expected_shards": 24,
                                           "reference": head["manifest"]})
    assert not result["complete"]
    assert any("missing vs. reference: config.json" in p for p in result["problems"])
    assert any("differ in size" in p and "model-00003" in p for p in result["problems"])


def test_draft_without_a_fixed_shard_count(tmp_path):
    path = tmp_path / "draft"
    path.mkdir()
    assert model_stage.verdict(model_stage.scan(str(path)))[1] == ["no shards found"]
    (path / "model.safetensors").write_bytes(b"d")
    assert model_stage.verdict(model_stage.scan(str(path))) == (True, [])
