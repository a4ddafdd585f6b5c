"""ray_cluster_probe: the ray_cluster role's one read per node, and the controller's decisions (actions).

The units are made by systemd_run_service itself on the fake systemd
(tests/doubles/fake_systemd), so "as wanted" is what the role's raylet task
leaves; `ray status` is a recorded output (tests/unit/fixtures/ray_status).
"""

import json
import os
import stat

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import procs, ray_auth, status_reports
from ansible_collections.laguna.spark.plugins.module_utils import ray_cluster_probe as rcp
from ansible_collections.laguna.spark.plugins.modules import ray_cluster_probe, systemd_run_service
from helpers import FIXTURES
from helpers.fake_bin import on_path
from helpers.filters import run_filter

TOKEN = "0123456789abcdef" * 4
UNIT = {
    "name": "laguna-ray-head",
    "description": "laguna-spark Ray head on 192.168.100.10",
    "command": ["/venv/bin/ray", "start", "--head", "--block", "--port", "6379"],
    "environment": {"NCCL_IB_GID_INDEX": "3", "VLLM_HOST_IP": "192.168.100.10"},
    "properties": {"LimitMEMLOCK": "infinity", "MemoryMax": "98G", "MemorySwapMax": "0"},
}


@pytest.fixture
def node(tmp_path, monkeypatch, systemd, run_module):
    """A node: HOME, the token file, loginctl and `ray status` (two nodes, three GPUs) on PATH."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(tmp_path / "units"))
    bindir = tmp_path / "bin"
    on_path(monkeypatch, bindir, {"loginctl": "#!/bin/sh\necho yes\n"})
    status = os.path.join(FIXTURES, "ray_status", "two_nodes.txt")
    ray = bindir / "ray"
    ray.write_text('#!/bin/sh\nif [ -e "%s/ray-down" ]; then echo "GCS unreachable" >&2; exit 1; fi\n'
                   'cat "${RAY_STATUS:-%s}"\n' % (tmp_path, status))
    ray.chmod(ray.stat().st_mode | stat.S_IEXEC)

    class Node:
        path = tmp_path
        token_path = str(tmp_path / ".ray" / "auth_token")

        def write_token(self, token=TOKEN, generation=1, mode=0o600):
            os.makedirs(os.path.dirname(self.token_path), exist_ok=True)
            with open(self.token_path, "w") as handle:
                handle.write(token)
            os.chmod(self.token_path, mode)
            if generation is not None:
                with open(ray_auth.generation_path(self.token_path), "w") as handle:
                    handle.write("%d\n" % generation)

        def unit(self, **extra):
            return dict(UNIT, runtime_dir=str(tmp_path / "run"), unit_dir=str(tmp_path / "units"), **extra)

        def start(self, token=TOKEN, check=True, **extra):
            """The role's raylet task, as it runs it."""
            args = dict(self.unit(**extra), settle=0,
                        secret_environment={"RAY_AUTH_TOKEN": token} if token else {})
            result = run_module(systemd_run_service, args)
            assert not result.failed, result
            return result

        def probe(self, is_head=True, generation=1, check_mode=False, **unit):
            args = {"is_head": is_head, "unit": self.unit(**unit), "token_path": self.token_path,
                    "token_generation": generation if is_head else None, "ray": str(ray),
                    "address": "192.168.100.10:6379", "status_timeout": 10, "expected_nodes": 2,
                    "expected_gpus": 2}
            result = run_module(ray_cluster_probe, args, check_mode=check_mode)
            assert not result.failed, result
            assert not result["changed"]
            assert TOKEN not in json.dumps(result), "the token must never be returned"
            return result

        def ray_down(self):
            (tmp_path / "ray-down").write_text("")

    return Node()


def _frozen(monkeypatch, unit, pids):
    monkeypatch.setattr(procs, "stopped", lambda name, proc="/proc", uid=None: list(pids) if name == unit else [])


def _set_unit(systemd, unit, **props):
    path = os.environ["FAKE_SYSTEMD_STATE"]
    state = systemd.read()
    state["units"][unit].update(props)
    with open(path, "w") as handle:
        json.dump(state, handle)


# --- a node as the role wants it ----------------------------------------------

def test_a_head_as_wanted_has_no_differences_and_reads_ray_status_once(node, systemd):
    node.write_token()
    node.start()
    shows = len(systemd.calls("systemctl"))
    result = node.probe()
    assert result["differences"] == [] and not result["change"] and result["action"] == "none"
    assert result["active_state"] == "active" and result["sub_state"] == "running"
    assert result["token"] == {"exists": True, "digest": ray_auth.digest(TOKEN), "generation": 1, "mode": "0600",
                               "reason": None}
    assert result["ray_status_ok"] and result["ray_status"]["node_count"] == 2
    assert result["linger"] == "yes"
    # Read only: one `systemctl show` asking ActiveState and SubState, nothing started or written.
    new = systemd.calls("systemctl")[shows:]
    assert len(new) == 1 and new[0][2] == "show" and "ActiveState" in new[0][-1] and "SubState" in new[0][-1]
    assert systemd.calls("systemd-run") and len(systemd.calls("systemd-run")) == 1


def test_a_worker_as_wanted_has_no_differences_and_does_not_read_ray_status(node):
    node.write_token(generation=None)
    node.start(name="laguna-ray-worker")
    result = node.probe(is_head=False, name="laguna-ray-worker")
    assert result["differences"] == [] and not result["change"]
    assert result["ray_status"] == {} and not result["ray_status_ok"]
    assert result["token"]["reason"] is None


def test_persistent_units_as_wanted_have_no_differences(node):
    node.write_token()
    node.start(persistent=True, start_env_script="#!/bin/sh\necho NCCL_IB_GID_INDEX=3 > \"$1\"\n",
               start_env_keys=["NCCL_IB_GID_INDEX"])
    result = node.probe(persistent=True, start_env_script="#!/bin/sh\necho NCCL_IB_GID_INDEX=3 > \"$1\"\n",
                        start_env_keys=["NCCL_IB_GID_INDEX"])
    assert result["differences"] == [] and result["unit_file_state"] == "enabled"


def test_the_probe_answers_the_same_in_check_mode(node):
    node.write_token()
    node.start()
    assert node.probe(check_mode=True)["differences"] == []


# --- one test per kind of difference -----------------------------------------

def test_a_killed_raylet_is_named_and_ray_status_is_not_read(node, systemd):
    node.write_token()
    node.start()
    _set_unit(systemd, "laguna-ray-head.service", ActiveState="failed", SubState="failed", Result="signal",
              MainPID="0")
    result = node.probe()
    assert result["change"] and result["action"] == "started"
    assert result["differences"] == [
        "laguna-ray-head.service: ActiveState failed (SubState failed, Result signal), wanted active"]
    assert result["ray_status"] == {}


def test_a_raylet_that_is_gone_is_named(node):
    node.write_token()
    result = node.probe()
    assert result["change"] and not result["loaded"]
    assert result["differences"] == [
        "laguna-ray-head.service: not loaded, wanted running",
        "laguna-ray-head.service: secret environment file %s is missing"
        % (node.path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env")]


def test_a_frozen_raylet_is_named_with_its_stopped_processes(node, monkeypatch):
    node.write_token()
    node.start()
    _frozen(monkeypatch, "laguna-ray-head.service", [4242, 4243])
    result = node.probe()
    assert result["change"] and result["action"] == "restarted" and result["stopped_pids"] == [4242, 4243]
    assert result["differences"] == [
        "laguna-ray-head.service: active but its processes 4242, 4243 are stopped (SIGSTOP), wanted running"]


def test_a_changed_setting_is_named_by_its_fingerprint(node):
    node.write_token()
    before = node.start()
    result = node.probe(environment=dict(UNIT["environment"], NCCL_IB_GID_INDEX="7"))
    assert result["change"] and result["action"] == "restarted"
    assert result["previous_fingerprint"] == before["fingerprint"] != result["fingerprint"]
    assert result["differences"] == ["laguna-ray-head.service: configuration fingerprint %s, wanted %s"
                                     % (before["fingerprint"], result["fingerprint"])]


def test_a_unit_running_with_another_token_than_its_file_is_named(node):
    """The token file rotated (by an earlier run, or by hand) while the raylet runs with the old one."""
    node.write_token()
    node.start(token="f" * 64)
    result = node.probe()
    assert result["change"] and any("configuration fingerprint" in d for d in result["differences"])


def test_a_disabled_persistent_unit_is_named(node, systemd):
    node.write_token()
    node.start(persistent=True)
    _set_unit(systemd, "laguna-ray-head.service", UnitFileState="disabled")
    result = node.probe(persistent=True)
    assert result["change"] and result["action"] == "enabled"
    assert result["differences"] == ["laguna-ray-head.service: UnitFileState disabled, wanted enabled"]


def test_an_edited_persistent_unit_file_is_named_by_its_checksum(node):
    node.write_token()
    started = node.start(persistent=True)
    path = started["unit_file"]
    text = open(path).read()
    with open(path, "w") as handle:
        handle.write(text.replace("MemoryMax=98G", "MemoryMax=90G"))
    result = node.probe(persistent=True)
    assert result["change"] and result["action"] == "restarted"
    assert result["differences"] == ["laguna-ray-head.service: unit file %s sha256 %s, wanted %s"
                                     % (path, rcp.sha(text.replace("MemoryMax=98G", "MemoryMax=90G")), rcp.sha(text))]


def test_a_transient_unit_where_a_persistent_one_is_wanted_and_back(node):
    node.write_token()
    node.start()
    result = node.probe(persistent=True)
    assert result["change"]
    assert ("laguna-ray-head.service: runs as a transient unit, wanted from %s"
            % os.path.join(str(node.path), "units", "laguna-ray-head.service")) in result["differences"]
    node.start(persistent=True)
    back = node.probe()
    assert back["change"] and back["action"] == "restarted"
    assert ("laguna-ray-head.service: unit file %s is there, wanted a transient unit"
            % os.path.join(str(node.path), "units", "laguna-ray-head.service")) in back["differences"]


def test_an_edited_secret_environment_file_is_named(node):
    node.write_token()
    node.start()
    secret = node.path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    secret.write_text(secret.read_text() + "EXTRA=1\n")
    result = node.probe()
    assert result["change"] and result["action"] == "none"
    assert result["differences"] == ["laguna-ray-head.service: secret environment file %s differs from the "
                                     "wanted one" % secret]


def test_a_resolved_variable_that_drifted_in_the_running_process_is_named(node, monkeypatch):
    script = "#!/bin/sh\necho NCCL_IB_GID_INDEX=3 > \"$1\"\n"
    node.write_token()
    node.start(persistent=True, start_env_script=script, start_env_keys=["NCCL_IB_GID_INDEX"])
    monkeypatch.setattr(procs, "environment", lambda pid, proc="/proc": {"NCCL_IB_GID_INDEX": "5"})
    result = node.probe(persistent=True, start_env_script=script, start_env_keys=["NCCL_IB_GID_INDEX"])
    assert result["change"] and result["action"] == "restarted"
    assert result["differences"] == ["laguna-ray-head.service: NCCL_IB_GID_INDEX of the running process is 5, "
                                     "wanted 3"]


def test_the_heads_token_missing_rotated_or_open_is_named(node):
    node.start(token=None)
    missing = node.probe()
    assert missing["token"]["reason"] == "missing" and not missing["token"]["exists"]
    assert "Ray token %s: missing" % node.token_path in missing["differences"]
    node.write_token(generation=1)
    node.start()
    rotated = node.probe(generation=2)
    assert rotated["token"]["reason"] == "rotated (generation 1 -> 2)"
    assert rotated["differences"] == ["Ray token %s: rotated (generation 1 -> 2)" % node.token_path]
    node.write_token(mode=0o644)
    assert node.probe()["differences"] == ["Ray token %s: mode 0644" % node.token_path]


def test_a_cluster_short_of_a_node_or_unreachable_is_named(node, monkeypatch, tmp_path):
    node.write_token()
    node.start()
    one = tmp_path / "one_node.txt"
    text = open(os.path.join(FIXTURES, "ray_status", "two_nodes.txt")).read().splitlines()
    active = [i for i, line in enumerate(text) if line.strip().startswith("1 node_")]
    one.write_text("\n".join(line for i, line in enumerate(text) if i != active[-1]) + "\n")
    monkeypatch.setenv("RAY_STATUS", str(one))
    short = node.probe()
    assert not short["ray_status_ok"] and not short["change"]
    assert short["differences"] == ["ray status at 192.168.100.10:6379: 1 of 2 node(s) and 3.0 of 2.0 GPU(s)"]
    node.ray_down()
    down = node.probe()
    assert not down["ray_status_ok"]
    assert down["differences"] == ["ray status at 192.168.100.10:6379: unreachable (GCS unreachable)"]


def test_without_ray_authentication_there_is_no_token_and_no_secret(node, run_module):
    node.start(token=None)
    args = {"is_head": False, "unit": node.unit()}
    result = run_module(ray_cluster_probe, args)
    assert result["differences"] == [] and result["token"] == {}


# --- the controller's half: the head's token against a worker's ------------------

HEAD = {"change": False, "token": {"digest": "aaaa", "reason": None}}


def test_nothing_to_do_on_a_cluster_as_wanted():
    worker = {"change": False, "token": {"digest": "aaaa", "reason": None}}
    assert rcp.actions(HEAD, HEAD, True, True) == {"token_make": False, "token_install": False, "unit": False,
                                                   "restart": False, "needs_token": False, "token_differs": None}
    assert rcp.actions(worker, HEAD, False, True) == {"token_make": False, "token_install": False, "unit": False,
                                                      "restart": False, "needs_token": False, "token_differs": None}


def test_a_worker_with_another_token_installs_the_heads_and_restarts():
    worker = {"change": False, "token": {"digest": "bbbb", "reason": None}}
    found = rcp.actions(worker, HEAD, False, True)
    assert found["token_install"] and found["unit"] and found["restart"]
    assert found["token_differs"] == "Ray token: sha256 bbbb, the head's aaaa"


def test_a_rotation_on_the_head_installs_and_restarts_everywhere():
    head = {"change": False, "token": {"digest": "aaaa", "reason": "rotated (generation 1 -> 2)"}}
    worker = {"change": False, "token": {"digest": "aaaa", "reason": None}}
    # Restarted (not only started when its settings differ), so that check mode names the restarts too.
    assert rcp.actions(head, head, True, True) == {"token_make": True, "token_install": False, "unit": True,
                                                   "restart": True, "needs_token": True, "token_differs": None}
    found = rcp.actions(worker, head, False, True)
    assert found["token_install"] and found["unit"] and found["token_make"] and found["restart"]
    assert found["token_differs"] == "Ray token: the head's changes (rotated (generation 1 -> 2))"


def test_a_heads_token_with_a_wrong_mode_is_made_again_and_restarts_nothing():
    head = {"change": False, "token": {"digest": "aaaa", "reason": "mode 0644"}}
    worker = {"change": False, "token": {"digest": "aaaa", "reason": None}}
    assert rcp.actions(head, head, True, True)["token_make"] and not rcp.actions(head, head, True, True)["restart"]
    found = rcp.actions(worker, head, False, True)
    assert not found["token_install"] and not found["unit"] and not found["restart"]


def test_a_worker_token_with_a_wrong_mode_is_installed_without_a_restart_decision():
    worker = {"change": False, "token": {"digest": "aaaa", "reason": "mode 0644"}}
    found = rcp.actions(worker, HEAD, False, True)
    assert found["token_install"] and not found["unit"] and not found["restart"]


def test_without_the_heads_probe_every_task_runs_and_decides():
    worker = {"change": False, "token": {"digest": "aaaa", "reason": None}}
    found = rcp.actions(worker, None, False, True)
    assert found["token_install"] and found["unit"] and found["token_make"] and not found["restart"]
    assert rcp.actions({}, None, True, True)["token_make"]


def test_without_authentication_only_the_unit_counts():
    assert rcp.actions({"change": True}, HEAD, False, False) == {"token_make": False, "token_install": False,
                                                                 "unit": True, "restart": False,
                                                                 "needs_token": False, "token_differs": None}


# --- the cluster's report from the probes alone -----------------------------------

def _quiet_probe(unit, **extra):
    return dict({"differences": [], "change": False, "unit": unit + ".service", "active_state": "active",
                 "result": "success", "linger": "yes", "loaded": True, "token": {"digest": "aaaa", "reason": None},
                 "ray_status": {"node_count": 2, "gpus_total": 2.0, "pending_demands": [], "reachable": True},
                 "ray_status_ok": True}, **extra)


def _hostvars(head_probe, worker_probe):
    return {
        "laguna-head": {"ray_cluster_probe": head_probe,
                        "ray_cluster_todo": rcp.actions(head_probe, head_probe, True, True)},
        "laguna-worker": {"ray_cluster_probe": worker_probe,
                          "ray_cluster_todo": rcp.actions(worker_probe, head_probe, False, True)},
    }


def test_a_quiet_cluster_is_reported_from_the_probes_as_status_yml_would():
    head, worker = _quiet_probe("laguna-ray-head"), _quiet_probe("laguna-ray-worker", ray_status={},
                                                                 ray_status_ok=False)
    hosts = ["laguna-head", "laguna-worker"]
    report, = run_filter("ray_cluster_probe", "ray_cluster_quiet_report",
                         [[hosts, _hostvars(head, worker), "laguna-head", 2, 2.0, "10.0.0.1:6379", 3, False]])
    nodes = [{"host": "laguna-head", "unit": "laguna-ray-head", "state": "active", "result": "success",
              "linger": "yes", "loaded": True},
             {"host": "laguna-worker", "unit": "laguna-ray-worker", "state": "active", "result": "success",
              "linger": "yes", "loaded": True}]
    assert report == status_reports.ray_cluster(nodes, head["ray_status"], 2, 2.0, "10.0.0.1:6379", 3, False)
    assert report["ok"] and report["problems"] == []


@pytest.mark.parametrize("head_extra,worker_extra", [
    ({"ray_status_ok": False, "differences": ["ray status at x: 1 of 2 node(s) and 1.0 of 2 GPU(s)"]}, {}),
    ({}, {"change": True, "differences": ["laguna-ray-worker.service: not loaded, wanted running"]}),
    ({}, {"token": {"digest": "bbbb", "reason": None}}),
    ({"token": {"digest": "aaaa", "reason": "rotated (generation 1 -> 2)"}}, {}),
])
def test_anything_to_do_or_a_short_cluster_leaves_no_quiet_report(head_extra, worker_extra):
    head, worker = _quiet_probe("laguna-ray-head", **head_extra), _quiet_probe("laguna-ray-worker", **worker_extra)
    assert run_filter("ray_cluster_probe", "ray_cluster_quiet_report",
                      [[["laguna-head", "laguna-worker"], _hostvars(head, worker), "laguna-head", 2, 2, "x"]]) == [{}]


def test_a_head_outside_the_play_counts_as_unknown():
    """--limit laguna-worker: the head's probe, even one an earlier play left, is not used."""
    head, worker = _quiet_probe("laguna-ray-head"), _quiet_probe("laguna-ray-worker")
    hostvars = _hostvars(head, worker)
    assert run_filter("ray_cluster_probe", "ray_cluster_quiet_report",
                      [[["laguna-worker"], hostvars, "laguna-head", 2, 2, "x"]]) == [{}]
    outside, inside, wrong = run_filter("ray_cluster_probe", "ray_cluster_actions", [
        [worker, hostvars, "laguna-head", False, True, ["laguna-worker"]],
        [worker, hostvars, "laguna-head", False, True, ["laguna-head", "laguna-worker"]],
        ["not a probe", hostvars, "laguna-head", False, True]])
    assert outside["unit"] and outside["token_install"] and outside["needs_token"]
    assert inside == {"token_make": False, "token_install": False, "unit": False, "restart": False,
                      "needs_token": False, "token_differs": None}
    assert wrong.endswith("Error: ray_cluster_actions: the input must be a ray_cluster_probe result")
