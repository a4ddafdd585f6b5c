"""vllm_serve_probe / module_utils.vllm_serve_probe: the vllm_serve role's one read per node."""
import os
import subprocess
import sys

import pytest

from helpers import DOUBLES, free_port
from ansible_collections.laguna.spark.plugins.module_utils import vllm_client
from ansible_collections.laguna.spark.plugins.module_utils import vllm_serve_probe as vp
from ansible_collections.laguna.spark.plugins.modules import systemd_run_service
from ansible_collections.laguna.spark.plugins.modules import vllm_serve_probe

MODEL = "laguna-s-2.1"  # the in-process stand-in's served name
UNIT = {
    "name": "laguna-vllm",
    "command": ["/venv/bin/vllm", "serve", "/models/laguna", "--port", "8000"],
    "environment": {"RAY_ADDRESS": "10.0.0.1:6379", "LAGUNA_RAYLETS": "a,b"},
    "properties": {"MemoryMax": "12G", "MemorySwapMax": "0"},
    "description": "laguna-spark vllm serve laguna-s-fp8 (TP 2)",
}
RAY_STATUS = os.path.join(os.path.dirname(DOUBLES), "unit", "fixtures", "ray_status", "two_nodes.txt")


# --- the decisions, on recorded reads ---------------------------------------

def _unit(**changes):
    found = {"unit": "laguna-vllm.service", "changed": False, "action": "none", "fingerprint": "bbb",
             "previous_fingerprint": "bbb", "stopped_pids": [], "wanted_persistent": False, "from_file": False,
             "has_file": False, "secret_differs": False, "start_env_drift": {},
             "state": {"running": True, "restarting": False,
                       "properties": {"ActiveState": "active", "SubState": "running", "UnitFileState": ""}}}
    found.update(changes)
    return found


def _stopped_unit(active="inactive", sub="dead"):
    return {"running": False, "restarting": False, "properties": {"ActiveState": active, "SubState": sub}}


def test_a_unit_as_wanted_has_no_difference():
    assert vp.unit_differences(_unit()) == []


def test_one_line_per_way_the_unit_differs():
    assert vp.unit_differences(_unit(changed=True, action="started", state=_stopped_unit("failed", "failed"))) == [
        "laguna-vllm.service: ActiveState failed (SubState failed), wanted active"]
    assert vp.unit_differences(_unit(changed=True, action="restarted", stopped_pids=[41, 42])) == [
        "laguna-vllm.service: processes stopped by a signal (PID 41, 42), wanted running"]
    assert vp.unit_differences(_unit(changed=True, action="restarted", previous_fingerprint="aaa")) == [
        "laguna-vllm.service: runs configuration aaa, wanted bbb (the command, environment or properties changed)"]
    disabled = _unit(changed=True, action="enabled", wanted_persistent=True, from_file=True, has_file=True)
    disabled["state"]["properties"]["UnitFileState"] = "disabled"
    assert vp.unit_differences(disabled) == ["laguna-vllm.service: UnitFileState disabled, wanted enabled"]
    assert vp.unit_differences(_unit(changed=True, action="restarted", has_file=True)) == [
        "laguna-vllm.service: a unit file of a persistent run is there, wanted a transient unit"]
    assert vp.unit_differences(_unit(changed=True, secret_differs=True)) == [
        "laguna-vllm.service: its private environment file differs from the wanted one"]


def _ray(**changes):
    found = {"reachable": True, "node_count": 2, "gpus_total": 2.0, "gpus_free": 0.0, "stderr_tail": []}
    found.update(changes)
    return found


def test_ray_as_wanted_has_no_difference():
    assert vp.ray_differences(_ray(), 2, True, "10.0.0.1:6379") == []  # a running vLLM holds its GPUs
    assert vp.ray_differences(_ray(gpus_free=2.0), 2, False, "10.0.0.1:6379") == []


def test_one_line_per_way_ray_differs():
    assert vp.ray_differences(_ray(reachable=False, stderr_tail=["no head"]), 2, True, "10.0.0.1:6379") == [
        "ray status at 10.0.0.1:6379: unreachable (no head)"]
    assert vp.ray_differences(_ray(gpus_total=1.0, node_count=1), 2, True, "a") == [
        "ray status: 1 GPU(s) on 1 node(s), wanted 2 (one per tensor-parallel rank)"]
    assert vp.ray_differences(_ray(gpus_free=1.0), 2, False, "a") == [
        "ray status: 1 GPU(s) free of 2, wanted 2 free for vLLM's start"]


API = {"url": "http://127.0.0.1:8000/", "served_model_name": MODEL, "check_acceptance": True}


def _api(**changes):
    found = {"health": {"state": "healthy", "detail": "HTTP 200", "smoke": {"ok": True, "state": "answered"}},
             "models": {"models": [MODEL], "detail": "HTTP 200"}, "spec": {"accepted_tokens": 5, "draft_tokens": 9}}
    found.update(changes)
    return found


def test_an_api_as_wanted_has_no_difference():
    assert vp.api_differences(_api(), API) == []


def test_one_line_per_way_the_api_differs():
    assert vp.api_differences(_api(health={"state": "hung", "detail": "no answer within 5 s"}), API) == [
        "http://127.0.0.1:8000: hung (no answer within 5 s), wanted answering"]
    wrong = {"state": "healthy", "detail": "HTTP 200", "smoke": {"ok": False, "state": "wrong", "message": "Lyon"}}
    assert vp.api_differences(_api(health=wrong), API) == ["http://127.0.0.1:8000: smoke test wrong: Lyon"]
    assert vp.api_differences(_api(models={"models": ["other"], "detail": "HTTP 200"}), API) == [
        "http://127.0.0.1:8000/v1/models: lists other (HTTP 200), wanted %s" % MODEL]
    assert vp.api_differences(_api(spec={"accepted_tokens": 0, "draft_tokens": 12}), API) == [
        "http://127.0.0.1:8000/metrics: 0 of 12 draft tokens accepted, wanted draft tokens accepted"]
    assert vp.api_differences(_api(spec={"accepted_tokens": 0}), dict(API, check_acceptance=False)) == []


# --- the module, on a fake systemd, a stand-in vLLM and recorded `ray status` --

@pytest.fixture
def ray_bin(tmp_path):
    ray = tmp_path / "ray"
    ray.write_text('#!/bin/sh\ncat "%s"\n' % RAY_STATUS)
    ray.chmod(0o755)
    return str(ray)


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """The nvidia-smi double; holder() starts a process that holds the GPU (a flock on its device file)."""
    device = tmp_path / "nvidia0"
    device.write_text("")
    monkeypatch.setenv("LAGUNA_STANDIN_GPU_DEVICE", str(device))
    procs = []

    def holder():
        proc = subprocess.Popen([sys.executable, "-c", "import fcntl, time; f = open(%r); "
                                 "fcntl.flock(f, fcntl.LOCK_SH); print('ready', flush=True); time.sleep(60)"
                                 % str(device)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc.pid

    holder.path = os.path.join(DOUBLES, "bin", "nvidia-smi")
    yield holder
    for proc in procs:
        proc.kill()
        proc.wait()


def _args(url, ray_bin, **changes):
    args = {"unit": dict(UNIT),
            "port": {"port": free_port(), "allowed_unit": "laguna-vllm.service"},
            "ray": {"ray": ray_bin, "address": "10.0.0.1:6379", "tensor_parallel_size": 2},
            "api": {"url": url, "timeout": 10, "served_model_name": MODEL, "check_acceptance": True,
                    "smoke": {"model": MODEL, "prompt": "capital of France? one word", "expect": "Paris"}}}
    args.update(changes)
    return args


def _start(run_module, unit=None):
    result = run_module(systemd_run_service, dict(unit or UNIT, settle=0))
    assert result["changed"] and not result.get("failed"), result
    return result


def _warm(url):
    """The verification's warm-up request: the draft proposes, the counters move."""
    vllm_client.post_json(url.rstrip("/") + "/v1/chat/completions", {
        "model": MODEL, "temperature": 0, "max_tokens": 64,
        "messages": [{"role": "user", "content": "Implement binary search in Python."}]}, timeout=30)


def test_a_head_as_wanted_has_no_difference_and_is_only_read(systemd, run_module, standin_server, ray_bin):
    url = standin_server(acceptance=0.75)
    _start(run_module)
    _warm(url)
    result = run_module(vllm_serve_probe, _args(url, ray_bin))
    assert not result.failed, result
    assert result["differences"] == [] and not result["changed"]
    assert result["unit"]["action"] == "none" and not result["unit"]["changed"]
    assert result["unit"]["state"]["properties"]["ActiveState"] == "active"
    assert result["api"]["verified"] and result["api"]["health"]["smoke"]["ok"]
    assert result["api"]["models"]["models"] == [MODEL] and result["api"]["spec"]["accepted_tokens"] > 0
    assert result["ray"]["gpus_total"] == 3.0 and result["port"]["foreign"] == []
    assert len(systemd.calls("systemd-run")) == 1


def test_a_changed_setting_or_a_stopped_unit_is_named_and_nothing_is_done(
        systemd, run_module, standin_server, ray_bin):
    url = standin_server(acceptance=0.75)
    first = _start(run_module)
    _warm(url)
    changed = dict(UNIT, command=UNIT["command"] + ["--max-num-seqs", "1"])
    result = run_module(vllm_serve_probe, _args(url, ray_bin, unit=changed))
    assert result["unit"]["changed"] and result["unit"]["action"] == "restarted"
    assert ("laguna-vllm.service: runs configuration %s, wanted %s (the command, environment or properties changed)"
            % (first["fingerprint"], result["unit"]["fingerprint"])) in result["differences"]
    assert len(systemd.calls("systemd-run")) == 1
    assert not [call for call in systemd.calls("systemctl") if set(call) & {"stop", "start", "restart"}]
    subprocess.run(["systemctl", "--user", "stop", "laguna-vllm.service"], check=True)
    stopped = run_module(vllm_serve_probe, _args(url, ray_bin))
    assert stopped["unit"]["action"] == "started"
    assert stopped["differences"][0].startswith("laguna-vllm.service: ActiveState inactive"), stopped["differences"]
    # Not running: a start needs the TP GPUs free; the recording has 3 of 3 free.
    assert not [line for line in stopped["differences"] if line.startswith("ray status")]


def test_an_api_that_does_not_answer_is_named(systemd, run_module, ray_bin):
    _start(run_module)
    url = "http://127.0.0.1:%d" % free_port()
    result = run_module(vllm_serve_probe, _args(url, ray_bin))
    assert not result["api"]["verified"] and result["api"]["health"]["state"] == "down"
    assert result["differences"] == ["%s: down (%s), wanted answering" % (url, result["api"]["health"]["detail"])]


def test_zero_acceptance_is_named(systemd, run_module, standin_server, ray_bin):
    url = standin_server(acceptance=0.0)
    _start(run_module)
    result = run_module(vllm_serve_probe, _args(url, ray_bin))
    assert not result["api"]["verified"]
    assert [line for line in result["differences"] if "/metrics" in line and "draft tokens accepted" in line], \
        result["differences"]


def test_a_port_held_by_another_program_is_named(systemd, run_module, standin_server, ray_bin):
    url = standin_server(acceptance=0.75)
    port = int(url.rsplit(":", 1)[1].strip("/"))  # the in-process stand-in: this test's process, in no unit
    wanted = {"port": port, "allowed_unit": "laguna-vllm.service"}
    result = run_module(vllm_serve_probe, _args(url, ray_bin, port=wanted))
    assert result["port"]["foreign"]
    assert result["port"]["message"].startswith("Port %d is held by pid %d" % (port, os.getpid()))
    assert result["port"]["message"] in result["differences"]


def test_every_node_s_raylet_and_gpu_read(systemd, run_module, nvidia_smi):
    _start(run_module, dict(UNIT, name="laguna-ray-worker", command=["/venv/bin/ray", "start", "--block"]))
    args = {"node": "laguna-worker", "raylet_unit": "laguna-ray-worker",
            "gpu": {"nvidia_smi": nvidia_smi.path, "allowed_units": ["laguna-ray-worker", "laguna-vllm"]}}
    result = run_module(vllm_serve_probe, args)
    assert result["differences"] == [] and result["gpu"]["processes"] == []
    assert result["raylet"]["running"] and "InvocationID" in result["raylet"]["properties"]
    assert set(vp.RAYLET_PROPERTIES) >= {"ActiveState", "SubState", "UnitFileState", "InvocationID"}
    pid = nvidia_smi()
    held = run_module(vllm_serve_probe, args)
    assert [proc["pid"] for proc in held["gpu"]["foreign"]] == [pid]
    assert held["differences"] == ["laguna-worker: GPU held outside the cluster's units by %s"
                                   % vp.gpu_procs.describe(held["gpu"]["foreign"][0])]
    assert "The GPU of laguna-worker is held by PID %d" % pid in held["gpu"]["message"]
    subprocess.run(["systemctl", "--user", "stop", "laguna-ray-worker.service"], check=True)
    gone = run_module(vllm_serve_probe, dict(args, gpu=None))
    assert gone["differences"] == ["laguna-ray-worker.service: ActiveState inactive (SubState dead), wanted active"]


def test_a_draft_that_vllm_would_refuse_is_named(run_module, tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}')
    result = run_module(vllm_serve_probe, {"draft": {"path": str(draft)}})
    assert not result["draft"]["ok"] and result["draft"]["exists"]
    assert result["differences"] == ["draft %s: %s" % (draft, " | ".join(result["draft"]["problems"]))]
    missing = run_module(vllm_serve_probe, {"draft": {"path": str(tmp_path / "none")}})
    assert not missing["draft"]["exists"] and missing["differences"][0].startswith("draft %s: " % (tmp_path / "none"))


def test_the_staged_checkpoints_are_scanned_as_model_stage_info_scans_them(tmp_path, run_module):
    """vllm_serve reads what is staged in its head probe: each of the staging
    role's artifacts, scanned as the staging role's status scans it
    (model_stage_info, against the digest record's list; staging_probe.scans),
    so status_report judges it the same way."""
    from ansible_collections.laguna.spark.plugins.module_utils import hashcache
    from ansible_collections.laguna.spark.plugins.modules import model_stage_info
    target, draft = tmp_path / "target", tmp_path / "draft"
    for path, shards in ((target, 2), (draft, 1)):
        path.mkdir()
        for i in range(1, shards + 1):
            (path / ("model-%05d-of-%05d.safetensors" % (i, shards))).write_bytes(b"x" * 10)
        (path / "config.json").write_text("{}")
    record = tmp_path / "record.json"
    cache = hashcache.HashCache()
    cache.record_list(str(target), ["config.json", "model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors"])
    record.write_text(cache.dump())
    (target / "notes.txt").write_text("a note")
    (target / "model-00003-of-00002.safetensors").write_bytes(b"x")  # a stray shard vLLM would read
    artifacts = [{"name": "target", "repo": "poolside/x", "path": str(target), "expected_shards": 2,
                  "revision": "main"},
                 {"name": "draft", "path": str(draft), "expected_shards": None, "fix_ignore": False}]
    result = run_module(vllm_serve_probe, {"checkpoints": {"artifacts": artifacts, "hash_cache": str(record)}})
    assert not result.failed, result
    for scanned, item in zip(result["checkpoints"], artifacts):
        alone = run_module(model_stage_info, dict({"path": item["path"], "hash_cache": str(record)},
                                                  **({"expected_shards": item["expected_shards"]}
                                                     if item["expected_shards"] else {})))
        scan_alone = {k: v for k, v in alone.items() if k not in ("changed", "invocation", "warnings", "deprecations")}
        assert scanned == dict(scan_alone, item={"name": item["name"], "path": item["path"]})
    assert result["checkpoints"][0]["problems"] and result["checkpoints"][1]["complete"]
