"""The fast no-op path: laguna.spark.converged (module_utils, module, action plugin)."""
import json
import os
import subprocess
import time

import pytest
from helpers import DOUBLES, free_port, gpu, servers
from helpers.procfs import fake_proc
from ansible_collections.laguna.spark.plugins.module_utils import converged as cv
from ansible_collections.laguna.spark.plugins.modules import converged, systemd_run_service


def test_the_fingerprint_ignores_key_order_and_sees_every_value():
    a = cv.fingerprint({"variables": {"x": 1, "y": [1, 2]}, "host": "h"})
    assert a == cv.fingerprint({"host": "h", "variables": {"y": [1, 2], "x": 1}})
    assert a != cv.fingerprint({"host": "h", "variables": {"y": [1, 2], "x": 2}})


def test_a_tree_sees_a_rewrite_with_the_same_size_and_mtime(tmp_path):
    shard = tmp_path / "model" / "model-00001.safetensors"
    shard.parent.mkdir()
    shard.write_bytes(b"a" * 64)
    before = cv.tree(str(tmp_path / "model"), 100)
    stat = os.stat(shard)
    time.sleep(0.01)
    shard.write_bytes(b"b" * 64)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: only ctime tells
    after = cv.tree(str(tmp_path / "model"), 100)
    assert before["model-00001.safetensors"][:2] == after["model-00001.safetensors"][:2]
    reasons = cv.compare({"trees": {"m": before}}, {"trees": {"m": after}})
    assert reasons == ["m changed: model-00001.safetensors"]


def test_the_changed_inputs_are_named():
    was = cv.digests({"collection": "a", "variables": {"x": 1, "y": 2}})
    now = cv.digests({"collection": "b", "variables": {"x": 1, "z": 3}})
    assert cv.changed_inputs(was, now) == "collection, variable y, variable z"
    assert cv.changed_inputs(was, now, most=1) == "collection and 2 more"


def test_a_tree_is_bounded(tmp_path):
    for i in range(5):
        (tmp_path / str(i)).write_text("x")
    with pytest.raises(ValueError, match="more than 3 entries"):
        cv.tree(str(tmp_path), 3)


def test_check_names_each_reason():
    evidence = {"boot_id": "b1", "units": {"laguna-vllm": {"ActiveState": "active", "MainPID": "10"}}}
    record = cv.make_record("f", {}, evidence)
    assert cv.check(None, "f", evidence) == (False, ["no record of a complete run on this node"])
    assert cv.check(record, "g", evidence)[1] == [
        "the inputs (the collection or a laguna.spark variable) changed since the last full run"]
    assert cv.check(record, "f", evidence) == (True, [])
    now = {"boot_id": "b2", "units": {"laguna-vllm": {"ActiveState": "failed", "MainPID": "0"}}}
    ok, reasons = cv.check(record, "f", now)
    assert not ok
    assert reasons == ["the node has restarted since the last full run",
                       "unit laguna-vllm changed (ActiveState active -> failed, MainPID 10 -> 0)",
                       "unit laguna-vllm is failed"]
    assert cv.check(dict(record, format=0), "f", evidence)[1] == [
        "the record was written by another version of the collection"]


def test_gather_reads_gid_tables_processes_and_sysfs_files(tmp_path):
    gids = tmp_path / "ib" / "mlx" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (gids / sub).mkdir(parents=True)
    (gids / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:0a59:4d0b\n")
    (gids / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (gids / "gid_attrs" / "ndevs" / "3").write_text("eth0\n")
    (tmp_path / "mtu").write_text("9000\n")
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("boot-1\n")
    (proc / "42").mkdir()
    (proc / "42" / "cmdline").write_bytes(b"python\0-m\0vllm serve\0/models/x\0")
    spec = {"gid_tables": [{"sysfs_root": str(tmp_path / "ib"), "hca": "mlx", "port": 1}],
            "reads": [str(tmp_path / "mtu")], "processes": ["[v]llm serve"]}
    evidence = cv.gather(spec, proc=str(proc))
    assert evidence["boot_id"] == "boot-1"
    assert evidence["gid_tables"] == [[[3, "0000:0000:0000:0000:0000:ffff:0a59:4d0b", "RoCE v2", "eth0"]]]
    assert evidence["reads"] == {str(tmp_path / "mtu"): "9000"}
    assert evidence["processes"] == {"[v]llm serve": [42]}
    (gids / "gids" / "3").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    (gids / "gids" / "7").write_text("0000:0000:0000:0000:0000:ffff:0a59:4d0b\n")
    (gids / "gid_attrs" / "types" / "7").write_text("RoCE v2\n")
    (gids / "gid_attrs" / "ndevs" / "7").write_text("eth0\n")
    (proc / "43").mkdir()
    (proc / "43" / "cmdline").write_bytes(b"vllm serve /models/manual\0")
    assert cv.compare(evidence, cv.gather(spec, proc=str(proc))) == [
        "gid tables changed", "processes matching [v]llm serve changed"]


class _Slow(servers.Handler):
    delay = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        time.sleep(self.delay)
        self.answer(200, b'{"data": [{"id": "laguna-s-fp8"}]}')


@pytest.fixture
def api(http_server):
    """The base URL of a /v1/models answering after _Slow.delay seconds."""
    yield http_server(_Slow)
    _Slow.delay = 0


def test_record_then_check_then_each_change_is_seen(systemd, run_module, tmp_path, api):
    run_module(systemd_run_service, {"name": "laguna-vllm", "command": ["/venv/bin/vllm", "serve"], "settle": 0})
    models = tmp_path / "models"
    models.mkdir()
    (models / "config.json").write_text("{}")
    record = str(tmp_path / "state" / "converged.json")
    url = api + "/v1/models"
    inputs = {"variables": {"vllm_serve_num_speculative_tokens": 6}}
    first = run_module(converged, {"state": "check", "path": record, "inputs": inputs})
    assert not first["converged"] and first["reasons"] == ["no record of a complete run on this node"]
    dry = run_module(converged, {"state": "record", "path": record, "fingerprint": first["fingerprint"],
                                 "units": ["laguna-vllm"], "trees": [str(models)], "urls": [url]}, check_mode=True)
    assert not dry["recorded"] and not os.path.exists(record)
    wrote = run_module(converged, {"state": "record", "path": record, "fingerprint": first["fingerprint"],
                                   "digests": first["digests"], "units": ["laguna-vllm"], "trees": [str(models)],
                                   "urls": [url]})
    assert wrote["recorded"] and not wrote["changed"]
    assert json.load(open(record))["spec"]["units"] == ["laguna-vllm"]
    again = run_module(converged, {"path": record, "inputs": inputs})
    assert again["converged"] and again["reasons"] == [] and again["fingerprint"] == first["fingerprint"]
    other = run_module(converged, {"path": record, "inputs": {"variables": {"vllm_serve_num_speculative_tokens": 5}}})
    assert not other["converged"] and other["reasons"] == [
        "the inputs (the collection or a laguna.spark variable) changed since the last full run: "
        "variable vllm_serve_num_speculative_tokens"]
    _Slow.delay = 3
    hung = run_module(converged, {"path": record, "inputs": inputs, "url_timeout": 1})
    assert not hung["converged"] and hung["reasons"][0].startswith(url + " did not answer within 1 s")
    _Slow.delay = 0
    (models / "extra.bin").write_text("x")
    extra = run_module(converged, {"path": record, "inputs": inputs})
    assert extra["reasons"] == ["%s changed: extra.bin, the directory itself" % models]
    os.unlink(models / "extra.bin")
    (models / "config.json").write_text("{}")
    run_module(systemd_run_service, {"name": "laguna-vllm", "command": ["/venv/bin/vllm", "serve"], "state": "stopped",
                                     "settle": 0})
    stopped = run_module(converged, {"path": record, "inputs": inputs})
    assert not stopped["converged"]
    assert any(r.startswith("unit laguna-vllm changed (ActiveState active -> inactive") for r in stopped["reasons"])
    assert "unit laguna-vllm is inactive" in stopped["reasons"]


def test_a_unit_that_is_not_running_is_not_recorded(systemd, run_module, tmp_path):
    record = str(tmp_path / "converged.json")
    result = run_module(converged, {"state": "record", "path": record, "fingerprint": "f", "units": ["laguna-vllm"]})
    assert not result["recorded"] and not result["converged"] and not os.path.exists(record)
    assert result["reasons"] == ["unit laguna-vllm is inactive"]


def test_a_persistent_unit_disabled_by_hand_is_seen_and_enabled_again(systemd, run_module, tmp_path, monkeypatch):
    units = tmp_path / "units"
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    monkeypatch.setenv("HOME", str(tmp_path))
    service = {"name": "laguna-vllm", "command": ["/venv/bin/vllm", "serve"], "settle": 0, "persistent": True,
               "unit_dir": str(units), "runtime_dir": str(tmp_path / "run")}
    assert run_module(systemd_run_service, service)["action"] == "started"
    record = str(tmp_path / "converged.json")
    inputs = {"variables": {}}
    first = run_module(converged, {"state": "check", "path": record, "inputs": inputs})
    assert run_module(converged, {"state": "record", "path": record, "fingerprint": first["fingerprint"],
                                  "units": ["laguna-vllm"]})["recorded"]
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]
    # Disabled by hand while it runs: it would not come back after a reboot.
    subprocess.run(["systemctl", "--user", "disable", "laguna-vllm.service"], check=True)
    disabled = run_module(converged, {"path": record, "inputs": inputs})
    assert not disabled["converged"]
    assert disabled["reasons"] == ["unit laguna-vllm changed (UnitFileState enabled -> disabled)"]
    # The complete run that follows (the roles) enables it again, without a restart.
    repaired = run_module(systemd_run_service, service)
    assert repaired["changed"] and repaired["action"] == "enabled"
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]


def test_every_roce_twins_mtu_and_state_are_recorded(systemd, run_module, tmp_path):
    net = tmp_path / "net"
    for twin in ("enp1s0f0np0", "enP2p1s0f0np0"):
        (net / twin).mkdir(parents=True)
        (net / twin / "mtu").write_text("9000\n")
        (net / twin / "operstate").write_text("up\n")
    record = str(tmp_path / "converged.json")
    inputs = {"variables": {}}
    first = run_module(converged, {"state": "check", "path": record, "inputs": inputs})
    run_module(converged, {"state": "record", "path": record, "fingerprint": first["fingerprint"],
                           "netdevs": ["enp1s0f0np0", "enP2p1s0f0np0"], "sysfs_net": str(net)})
    assert sorted(json.load(open(record))["evidence"]["reads"]) == sorted(
        str(net / twin / attr) for twin in ("enp1s0f0np0", "enP2p1s0f0np0") for attr in ("mtu", "operstate"))
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]
    # The second twin's MTU went back to the default.
    (net / "enP2p1s0f0np0" / "mtu").write_text("1500\n")
    drifted = run_module(converged, {"path": record, "inputs": inputs})
    assert not drifted["converged"] and drifted["reasons"] == ["file %s changed" % (net / "enP2p1s0f0np0" / "mtu")]


def test_a_unit_whose_processes_a_signal_stopped_is_not_converged(tmp_path):
    """A frozen raylet (SIGSTOP): its unit stays active and its PIDs stay the
    same while Ray drops the node; procs.stopped, which systemd_run_service
    restarts on, names it."""
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("boot-1\n")
    cgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/laguna-ray-worker.service\n"
    fake_proc(proc, 20, ["/v/bin/ray", "start", "--block"], cgroup)
    fake_proc(proc, 21, ["/v/lib/raylet"], cgroup)
    spec = {"units": ["laguna-ray-worker"]}
    props = {"ActiveState": "active", "MainPID": "20", "InvocationID": "abc"}
    recorded = cv.gather(spec, units=lambda name: dict(props), proc=str(proc))
    assert recorded["stopped"] == {"laguna-ray-worker": []}
    record = cv.make_record("f", spec, recorded)
    assert cv.check(record, "f", cv.gather(spec, units=lambda name: dict(props), proc=str(proc))) == (True, [])
    for pid in (20, 21):
        stat = proc / str(pid) / "stat"
        stat.write_text(stat.read_text().replace(") S ", ") T "))
    ok, reasons = cv.check(record, "f", cv.gather(spec, units=lambda name: dict(props), proc=str(proc)))
    assert not ok and reasons == [
        "unit laguna-ray-worker is active but its processes 20, 21 are stopped (SIGSTOP): a run restarts it"]


def test_a_port_nobody_answers_on_is_reported_within_the_timeout():
    start = time.monotonic()
    reasons = converged.probe_urls(["http://127.0.0.1:%d/v1/models" % free_port()], 2)
    assert reasons and "did not answer within 2 s" in reasons[0] and time.monotonic() - start < 3


def test_a_new_process_holding_the_gpu_is_seen(run_module, tmp_path, monkeypatch):
    # The nvidia-smi stand-in reports the processes holding its device (tests/helpers/gpu.py).
    device = tmp_path / "nvidia0"
    device.touch()
    monkeypatch.setenv("LAGUNA_STANDIN_GPU_DEVICE", str(device))
    smi = os.path.join(DOUBLES, "bin", "nvidia-smi")
    record, inputs = str(tmp_path / "converged.json"), {"variables": {"laguna_user": "spark"}}
    first = run_module(converged, {"state": "check", "path": record, "inputs": inputs})
    run_module(converged, {"state": "record", "path": record, "fingerprint": first["fingerprint"], "nvidia_smi": smi})
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]
    with gpu.holding(device) as child:
        held = run_module(converged, {"path": record, "inputs": inputs})
        assert not held["converged"]
        assert held["reasons"] == ["the processes holding the GPU changed ([] -> [%d])" % child.pid]
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]


def test_the_api_is_asked_with_its_key(http_server):
    # A server that wants a key, as vLLM does on /v1 with --api-key: 401 without it.
    class Handler(servers.Handler):
        def do_GET(self):  # noqa: N802
            self.answer(200 if self.headers.get("Authorization") == "Bearer sk-converged" else 401)

    url = http_server(Handler) + "/v1/models"
    without = converged.probe_urls([url], 2)
    assert without and "401" in without[0] and "sk-converged" not in without[0]
    assert converged.probe_urls([url], 2, "sk-converged") == []


def test_the_run_ends_on_the_fast_path_only_when_every_host_is_converged():
    yes, no = {"converged": True, "reasons": []}, {"converged": False, "reasons": ["a unit restarted"]}
    assert cv.everywhere([yes, yes])
    assert not cv.everywhere([yes, no])
    # A host whose check could not run (unreachable, failed: no converged key) or did not register one.
    assert not cv.everywhere([yes, {"unreachable": True, "msg": "ssh: connect to host"}])
    assert not cv.everywhere([yes, None])


def test_the_converged_filter_reads_each_hosts_registered_check():
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel

    hostvars = {"head": {"laguna_converged": {"converged": True}}, "worker": {"laguna_converged": {"converged": True}},
                "fresh": {}}
    both, one_fresh, unknown = run_filter("converged_everywhere", "converged_everywhere", [
        [["head", "worker"], hostvars], [["head", "fresh"], hostvars], [["head", "spark-9"], hostvars]])
    assert both is True and one_fresh is False
    assert unknown.startswith("Ansible") and unknown.endswith("converged_everywhere: spark-9 is not in the inventory")


def test_a_vllm_that_lists_its_model_but_finishes_no_request_is_not_converged(systemd, run_module, tmp_path,
                                                                              http_server):
    # The record keeps the verification's smoke test; each check runs it (vllm_health.smoke) within url_timeout.
    run_module(systemd_run_service, {"name": "laguna-vllm", "command": ["/venv/bin/vllm", "serve"], "settle": 0})
    record, inputs = str(tmp_path / "converged.json"), {"variables": {}}
    smoke = {"model": "laguna-s-2.1", "prompt": "capital of France? one word", "expect": "Paris"}
    fingerprint = run_module(converged, {"path": record, "inputs": inputs})["fingerprint"]
    bodies = []
    answering = http_server(servers.vllm_api(bodies=bodies))
    wrote = run_module(converged, {"state": "record", "path": record, "fingerprint": fingerprint,
                                   "units": ["laguna-vllm"], "urls": [answering + "/health"], "api_url": answering,
                                   "smoke": smoke, "api_key": "sk-smoke"})
    assert wrote["recorded"] and bodies == []  # recording asks nothing
    assert json.load(open(record))["spec"]["smoke"] == dict(smoke, max_tokens=8, timeout=None)
    ok = run_module(converged, {"path": record, "inputs": inputs, "api_key": "sk-smoke"})
    assert ok["converged"] and bodies[-1][2] == "Bearer sk-smoke" and bodies[-1][1]["max_tokens"] == 8
    for mode, content, reason in (("wedged", "", "got no answer within 1 s; vLLM generated no token meanwhile"),
                                  ("answer", "Lyon", 'answered "Lyon" to "capital of France? one word"')):
        other = http_server(servers.vllm_api(mode, content))
        spec = json.load(open(record))
        spec["spec"].update(api_url=other, urls=[other + "/health"])
        with open(record, "w") as handle:
            json.dump(spec, handle)
        found = run_module(converged, {"path": record, "inputs": inputs, "url_timeout": 1})
        assert not found["converged"] and len(found["reasons"]) == 1 and reason in found["reasons"][0], found


def test_a_staged_revision_that_moved_on_the_hub_is_not_converged(systemd, run_module, tmp_path, hub, monkeypatch):
    # The record keeps the commit each staged revision was on (the staging role's hf_repo_manifest results); each
    # check asks the Hub the staging role asks (HF_ENDPOINT), as the role does.
    from ansible_collections.laguna.spark.plugins.modules import hf_repo_manifest  # pylint: disable=import-outside-toplevel
    monkeypatch.setenv("HF_ENDPOINT", hub["endpoint"])
    manifest = run_module(hf_repo_manifest, {"repo": "poolside/Laguna-S-2.1-FP8"})
    record, inputs = str(tmp_path / "converged.json"), {"variables": {}}
    fingerprint = run_module(converged, {"path": record, "inputs": inputs})["fingerprint"]
    run_module(converged, {"state": "record", "path": record, "fingerprint": fingerprint,
                           "hub_manifests": [{"repo": manifest["repo"], "revision": manifest["revision"],
                                              "commit": manifest["commit"], "files": manifest["files"],
                                              "item": {"repo": "poolside/Laguna-S-2.1-FP8"}}]})
    assert json.load(open(record))["spec"]["hub"] == [
        {"repo": "poolside/Laguna-S-2.1-FP8", "revision": "main", "commit": manifest["commit"]}]
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]
    (hub["root"].parent / (hub["root"].name + ".commit")).write_text("moved-1\n")
    moved = run_module(converged, {"path": record, "inputs": inputs})
    assert not moved["converged"] and len(moved["reasons"]) == 1
    assert moved["reasons"][0].startswith("poolside/Laguna-S-2.1-FP8@main moved on the Hub to commit ")


class _Dashboard(servers.Handler):
    """Ray 2.60's GET /nodes?view=hostNameList, behind the cluster's token."""
    hosts, token = ["laguna-head", "laguna-worker"], "t0ken"

    def do_GET(self):  # noqa: N802
        if self.headers.get("Authorization") != "Bearer " + self.token:
            return self.answer(401, b"Unauthorized: Missing authentication token")
        assert self.path == "/nodes?view=hostNameList"
        self.answer(200, json.dumps({"result": True, "msg": "Node hostname list fetched.",
                                     "data": {"hostNameList": list(self.hosts)}}).encode())


def test_a_node_ray_no_longer_lists_is_not_converged_and_a_dashboard_that_does_not_answer_leaves_no_record(
        systemd, run_module, tmp_path, http_server):
    # The head records the nodes Ray lists as alive (its dashboard, with the token); a worker Ray dropped
    # while its raylet unit stays active is named by the next check.
    token = tmp_path / "auth_token"
    token.write_text("t0ken\n")
    dashboard = http_server(type("D", (_Dashboard,), {"hosts": ["laguna-worker", "laguna-head"]}))
    record, inputs = str(tmp_path / "converged.json"), {"variables": {}}
    fingerprint = run_module(converged, {"path": record, "inputs": inputs})["fingerprint"]
    wrote = run_module(converged, {"state": "record", "path": record, "fingerprint": fingerprint,
                                   "ray_dashboard": dashboard, "ray_token_path": str(token)})
    assert wrote["recorded"], wrote
    assert json.load(open(record))["evidence"]["ray_hosts"] == ["laguna-head", "laguna-worker"]
    assert "t0ken" not in open(record).read()
    assert run_module(converged, {"path": record, "inputs": inputs})["converged"]
    saved = json.load(open(record))
    saved["spec"]["ray_dashboard"] = http_server(type("D", (_Dashboard,), {"hosts": ["laguna-head"]}))
    with open(record, "w") as handle:
        json.dump(saved, handle)
    dropped = run_module(converged, {"path": record, "inputs": inputs})
    assert dropped["reasons"] == [
        "the nodes Ray lists as alive changed (laguna-head, laguna-worker -> laguna-head)"]
    # Without the token (or with nothing listening), the nodes are unknown: no record vouches for them.
    token.write_text("wrong\n")
    refused = run_module(converged, {"state": "record", "path": str(tmp_path / "other.json"),
                                     "fingerprint": fingerprint, "ray_dashboard": dashboard,
                                     "ray_token_path": str(token)})
    assert not refused["recorded"] and not os.path.exists(tmp_path / "other.json")
    assert refused["reasons"][0].startswith("cannot read which nodes Ray lists as alive: %s: " % dashboard)
    assert "401" in refused["reasons"][0]


def test_the_record_waits_for_every_node_to_be_listed_and_records_nothing_short_of_them(
        systemd, run_module, tmp_path, http_server, monkeypatch):
    # Ray's dashboard learns of a node that joined a few seconds after `ray status` lists it: the record
    # asks again (bounded) until it lists every cluster node, and records nothing if it never does.
    from ansible_collections.laguna.spark.plugins.module_utils import ray_status  # pylint: disable=import-outside-toplevel
    answers = [["laguna-head"], ["laguna-head"], ["laguna-head", "laguna-worker"]]

    class Opener:
        def __call__(self, url, **kwargs):
            hosts = answers.pop(0) if len(answers) > 1 else answers[0]
            return type("R", (), {"read": lambda self: json.dumps({"result": True, "data": {"hostNameList": hosts}})
                                  .encode()})()

    now = [0.0]
    hosts = ray_status.wait_alive_hosts("http://dash", None, 2, 60, opener=Opener(), clock=lambda: now[0],
                                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert hosts == ["laguna-head", "laguna-worker"] and now[0] == 2.0
    answers[:] = [["laguna-head"]]
    now[0] = 0.0
    short = ray_status.wait_alive_hosts("http://dash", None, 2, 5, opener=Opener(), clock=lambda: now[0],
                                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert short == ["laguna-head"] and now[0] == 5.0
    monkeypatch.setattr(converged, "RAY_RECORD_WAIT", 1)
    token = tmp_path / "auth_token"
    token.write_text("t0ken")
    one = http_server(type("D", (_Dashboard,), {"hosts": ["laguna-head"]}))
    record = tmp_path / "converged.json"
    fingerprint = run_module(converged, {"path": str(record), "inputs": {"variables": {}}})["fingerprint"]
    refused = run_module(converged, {"state": "record", "path": str(record), "fingerprint": fingerprint,
                                     "ray_dashboard": one, "ray_token_path": str(token), "ray_nodes": 2})
    assert not refused["recorded"] and not record.exists()
    assert refused["reasons"] == ["cannot read which nodes Ray lists as alive: Ray lists 1 of 2 nodes (laguna-head) "
                                  "after 1 s"]
