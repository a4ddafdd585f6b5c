"""gpu_procs / gpu_processes: nvidia-smi's compute-apps CSV, the unit of each holder, the verdict.

The module runs the nvidia-smi stand-in (tests/doubles/bin/nvidia-smi, its
format checked against the recording by tests/conformance) with a real
process holding the stand-in GPU.
"""

import json
import os

import pytest

from helpers import DOUBLES, gpu
from helpers.procfs import fake_proc
from ansible_collections.laguna.spark.plugins.module_utils import gpu_procs
from ansible_collections.laguna.spark.plugins.modules import gpu_processes

NVIDIA_SMI = os.path.join(DOUBLES, "bin", "nvidia-smi")
UNITS = ["laguna-ray-head", "laguna-ray-worker", "laguna-vllm"]


def test_parse_reads_pid_name_and_memory_with_or_without_units():
    assert gpu_procs.parse("5120, ray::RayWorkerProc.run, 91419\n") == [
        {"pid": 5120, "name": "ray::RayWorkerProc.run", "used_mib": 91419}]
    assert gpu_procs.parse("7, /usr/bin/python3, 1200 MiB\n8, python3 a, b.py, [N/A]\n") == [
        {"pid": 7, "name": "/usr/bin/python3", "used_mib": 1200},
        {"pid": 8, "name": "python3 a, b.py", "used_mib": None}]


def test_parse_of_nothing_is_no_process():
    assert gpu_procs.parse("") == [] and gpu_procs.parse("No running processes found\n") == []


def test_parse_refuses_a_line_it_does_not_understand():
    with pytest.raises(ValueError, match="not a pid, process_name, used_memory line"):
        gpu_procs.parse("pid, process_name, used_memory [MiB]\n")


def test_classify_owns_what_the_cluster_units_run_and_nothing_else(tmp_path):
    base = "1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/"
    fake_proc(tmp_path, 11, ["ray::RayWorkerProc.run"], base + "laguna-ray-worker.service\n")
    fake_proc(tmp_path, 12, ["VLLM::EngineCore"], "0::/user.slice/user-1000.slice/user@1000.service/"
                                                  "app.slice/laguna-vllm.service\n")
    fake_proc(tmp_path, 13, ["python3", "train.py"], "0::/user.slice/user-1001.slice/session-4.scope\n")
    found = [{"pid": pid, "name": "x", "used_mib": 10} for pid in (11, 12, 13, 14)]  # 14 ended meanwhile
    result = gpu_procs.classify(found, UNITS, proc=str(tmp_path))
    assert [(p["pid"], p["unit"], p["owned"]) for p in result] == [
        (11, "laguna-ray-worker.service", True), (12, "laguna-vllm.service", True), (13, "session-4.scope", False)]
    assert result[2]["cmdline"] == "python3 train.py"


def test_message_names_each_holder_the_fix_and_the_override():
    foreign = [{"pid": 13, "name": "python3", "used_mib": 1200, "unit": "session-4.scope", "user": "bob",
                "cmdline": "python3 train.py"}]
    text = gpu_procs.message(foreign, UNITS, "spark-2")
    assert "The GPU of spark-2 is held by PID 13 (python3 train.py; unit session-4.scope, user bob, 1200 MiB)" in text
    assert "kill 13" in text and "vllm_serve_foreign_gpu_processes: warn" in text
    assert gpu_procs.message([], UNITS, "spark-2") == ""


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """A real process holding the stand-in GPU (a flock on its device file)."""
    device = tmp_path / "nvidia0"
    device.touch()
    monkeypatch.setenv("LAGUNA_STANDIN_GPU_DEVICE", str(device))
    with gpu.holding(device) as child:
        yield child


def test_a_process_outside_the_units_fails_the_module_naming_it(run_module, holder):
    result = run_module(gpu_processes, {"nvidia_smi": NVIDIA_SMI, "allowed_units": UNITS, "node": "spark-2"})
    assert result.failed
    assert [p["pid"] for p in result["foreign"]] == [holder.pid]
    assert "The GPU of spark-2 is held by PID %d" % holder.pid in result["msg"]
    assert "kill %d" % holder.pid in result["msg"]


def test_warn_reports_the_holder_and_succeeds(run_module, holder):
    result = run_module(gpu_processes, {"nvidia_smi": NVIDIA_SMI, "allowed_units": UNITS, "foreign": "warn"},
                        check_mode=True)
    assert not result.failed and not result["changed"]
    assert [p["pid"] for p in result["foreign"]] == [holder.pid]
    assert "PID %d" % holder.pid in json.dumps(result["warnings"])


def test_a_free_gpu_passes(run_module, tmp_path, monkeypatch):
    monkeypatch.setenv("LAGUNA_STANDIN_GPU_DEVICE", str(tmp_path / "nvidia0"))
    (tmp_path / "nvidia0").touch()
    result = run_module(gpu_processes, {"nvidia_smi": NVIDIA_SMI, "allowed_units": UNITS})
    assert not result.failed and result["processes"] == [] and result["message"] == ""


def test_a_missing_or_hanging_nvidia_smi_fails_saying_so(run_module, tmp_path):
    missing = run_module(gpu_processes, {"nvidia_smi": str(tmp_path / "nvidia-smi"), "allowed_units": UNITS})
    assert missing.failed and "failed (rc=127)" in missing["msg"]
    hung = tmp_path / "hung-smi"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    result = run_module(gpu_processes, {"nvidia_smi": str(hung), "allowed_units": UNITS, "timeout": 1})
    assert result.failed and "did not answer" in result["msg"] and "within 1 s" in result["msg"]
