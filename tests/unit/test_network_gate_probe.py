"""network_gate_probe, the network_gate role's one read per node: the SSH mesh check (the code of
ssh_mesh_peers's, module_utils.ssh_mesh.run_checks), the test's tool, and on the head the plan
(ib_bw_check's) compared with the record of the last measurement that passed. On a node as wanted
it reports no difference; each kind of difference is named in one line and sets what the role acts on
(tool_missing: install; measure: measure)."""
import copy
import getpass
import json
import os

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import network_gate, perftest
from ansible_collections.laguna.spark.plugins.modules import ib_bw_check, network_gate_probe
from helpers import ROOT
from helpers.sysfs import fabric_node as node

USER = getpass.getuser()


@pytest.fixture
def tool(tmp_path):
    path = tmp_path / "bin" / "ib_write_bw"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def probe(run_module, tool_path, record=None, head=None, workers=None, check_mode=False, **extra):
    args = dict(user=USER, tool_path=tool_path, head=head if head is not None else node("head", 1),
                workers=workers if workers is not None else [node("w1", 2)])
    if record is not None:
        args["record"] = str(record)
    args.update(extra)
    if args["head"] is False:
        del args["head"]
    return run_module(network_gate_probe, args, check_mode=check_mode)


def write_record(path, result):
    """The record as the role writes it after a measurement that passed (measure.yml)."""
    path.write_text(json.dumps({"inputs": result["record_inputs"], "totals": {"w1": 192.62}, "measurements": []},
                               indent=4) + "\n")


@pytest.fixture
def recorded(run_module, tmp_path, tool):
    """A record of the plan as it is, as a passing measurement leaves it."""
    record = tmp_path / "network_gate.json"
    write_record(record, probe(run_module, tool, record))
    return record


def test_on_a_node_as_wanted_nothing_differs_and_nothing_is_measured(run_module, recorded, tool):
    before = recorded.read_text()
    for check_mode in (False, True):
        result = probe(run_module, tool, recorded, check_mode=check_mode)
        assert not result.failed, result.get("msg")
        assert result["differences"] == [] and not result["measure"] and not result["tool_missing"]
        assert result["tool_found"] == tool and not result["changed"]
    assert recorded.read_text() == before  # only read


def test_the_plan_is_ib_bw_checks(run_module, tool):
    result = probe(run_module, tool, duration=2, qps=8)
    planned = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2)], "tool_path": tool,
                                       "duration": 2, "qps": 8})
    assert sorted(result["plan"]) == ["pairs", "threshold_total"]
    assert result["plan"] == {"pairs": planned["pairs"], "threshold_total": planned["threshold_total"]}
    assert result["record_inputs"]["tests"][1]["client_argv"][0] == tool
    assert "client_command" not in result["record_inputs"]["tests"][0]  # the bounds derive from the argv
    # A bound ib_bw_check refuses, the probe refuses in the same words.
    bad = probe(run_module, tool, duration=0)
    assert bad.failed and "duration 1-600 s, qps 1-64 and base_port 1024-65000 are the bounds" in bad["msg"]


def test_no_record_is_measured(run_module, tmp_path, tool):
    record = tmp_path / "state" / "network_gate.json"
    result = probe(run_module, tool, record)
    assert result["measure"]
    assert result["differences"] == ["%s: no measurement recorded; measure" % record]


@pytest.mark.parametrize("text, why", [
    ("{not json", "unreadable (Expecting property name"),
    ('{"totals": {}}', "unreadable ('inputs')"),
    ('{"inputs": [1]}', "unreadable (inputs is not a mapping)"),
    ("", "unreadable (Expecting value"),
])
def test_a_record_that_cannot_be_read_is_measured_again(run_module, tmp_path, tool, text, why):
    record = tmp_path / "network_gate.json"
    record.write_text(text)
    result = probe(run_module, tool, record)
    assert result["measure"]
    assert len(result["differences"]) == 1 and result["differences"][0].startswith("%s: %s" % (record, why))


def test_a_record_of_another_version_is_measured_again(run_module, recorded, tool):
    data = json.loads(recorded.read_text())
    data["inputs"]["version"] = 0
    recorded.write_text(json.dumps(data))
    result = probe(run_module, tool, recorded)
    assert result["measure"]
    assert result["differences"] == ["%s: record version 0, this collection writes 1; measure again" % recorded]


def test_a_threshold_changed_is_measured_again(run_module, recorded, tool):
    result = probe(run_module, tool, recorded, min_gbps_per_device=95.0)
    assert result["measure"]
    assert result["differences"] == [
        "%s: min_gbps_per_device 90.0 -> 95.0; measure again" % recorded,
        "%s: threshold_total 180.0 -> 190.0; measure again" % recorded]
    total = probe(run_module, tool, recorded, min_gbps_total=150.0)
    assert total["differences"] == ["%s: threshold_total 180.0 -> 150.0; measure again" % recorded]


def test_a_link_changed_in_sysfs_names_the_test_and_the_link(run_module, recorded, tool):
    # The worker's second twin came back at MTU 1500: that test is planned the same, its link is not.
    result = probe(run_module, tool, recorded, workers=[node("w1", 2, mtu1=1500)])
    assert result["measure"]
    assert result["differences"] == [
        "%s: test 1 (head roceP2p1s0f1 -> w1 roceP2p1s0f1): worker_link.mtu 9000 -> 1500; measure again" % recorded]


def test_a_command_line_changed_names_the_test_and_the_argv(run_module, recorded, tool):
    result = probe(run_module, tool, recorded, workers=[node("w1", 2, gid=5)])
    lines = result["differences"]
    assert result["measure"] and len(lines) == 2
    assert lines[0].startswith("%s: test 0 (head rocep1s0f1 -> w1 rocep1s0f1): server_argv %s -d rocep1s0f1 -i 1 -x 3 "
                               % (recorded, tool))
    assert "-> %s -d rocep1s0f1 -i 1 -x 5 " % tool in lines[0]


def test_a_test_more_or_less_is_counted(run_module, recorded, tool):
    head = node("head", 1)
    head["twins"], head["addresses"], head["gid_indexes"] = head["twins"][:1], head["addresses"][:1], [3]
    result = probe(run_module, tool, recorded, head=head)
    assert result["measure"]
    # One twin: threshold_total is per device x 1 now, and the second test is gone.
    assert result["differences"] == [
        "%s: threshold_total 180.0 -> 90.0; measure again" % recorded,
        "%s: 2 test(s) recorded, 1 planned (test 0 (head rocep1s0f1 -> w1 rocep1s0f1)); measure again" % recorded]
    second = probe(run_module, tool, recorded, workers=[node("w1", 2), node("w2", 3)])
    assert second["differences"] == [
        "%s: 2 test(s) recorded, 4 planned (%s); measure again" % (recorded, ", ".join(
            "test %d (head %s -> %s %s)" % (k, dev, worker, dev) for worker in ("w1", "w2")
            for k, dev in enumerate(("rocep1s0f1", "roceP2p1s0f1"))))]


def test_another_tool_is_measured_again_and_all_gather_is_recorded_by_its_command(run_module, recorded, tool):
    env = {"NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1"}
    result = probe(run_module, tool, recorded, tool="all_gather_perf", nccl_env=env)
    assert result["measure"]
    assert "%s: tool ib_write_bw -> all_gather_perf; measure again" % recorded in result["differences"]
    write_record(recorded, result)
    assert probe(run_module, tool, recorded, tool="all_gather_perf", nccl_env=env)["differences"] == []
    changed = probe(run_module, tool, recorded, tool="all_gather_perf", nccl_env=dict(env, NCCL_DEBUG="INFO"))
    assert changed["measure"] and changed["differences"][0].startswith("%s: all_gather_perf: argv mpirun" % recorded)


def test_remeasure_measures_a_record_that_stands(run_module, recorded, tool):
    result = probe(run_module, tool, recorded, remeasure=True)
    assert result["measure"]
    assert result["differences"] == ["%s: the last measurement stands, measured again (remeasure)" % recorded]


def test_a_missing_tool_is_named_and_not_looked_for_where_nothing_is_measured(run_module, recorded, tmp_path):
    missing = str(tmp_path / "nowhere" / "ib_write_bw")
    result = probe(run_module, missing, recorded)
    assert result["tool_missing"] and result["tool_found"] is None
    # The record is of the plan with the other path: it differs too (the command lines name the tool).
    assert result["differences"][0] == "%s: not found (command -v)" % missing
    skipped = probe(run_module, missing, find_tool=False)
    assert not skipped["tool_missing"] and skipped["differences"] == []


def test_the_tool_is_found_on_path_as_command_v_finds_it(tmp_path, tool):
    bin_dir = os.path.dirname(tool)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "ib_write_bw").write_text("not executable")
    assert network_gate.find_tool("ib_write_bw", "%s:%s" % (plain, bin_dir)) == tool
    assert network_gate.find_tool("ib_write_bw", str(plain)) is None
    assert network_gate.find_tool(tool, "") == tool
    assert network_gate.find_tool(str(plain / "ib_write_bw"), "") is None


def test_a_worker_plans_nothing_and_compares_no_record(run_module, tmp_path, tool):
    result = probe(run_module, tool, head=False, workers=[])
    assert result["differences"] == [] and result["plan"] == {} and result["record_inputs"] == {}
    assert not result["measure"]


def test_a_failed_ssh_check_is_a_difference_and_each_check_is_returned(run_module, tmp_path, tool, recorded,
                                                                       monkeypatch):
    # The same ssh command as ssh_mesh's verify.yml and ssh_mesh_peers (module_utils.ssh_mesh.run_checks).
    bin_dir, log = tmp_path / "sshbin", tmp_path / "ssh.log"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\necho \"$@\" >> %s\ncase \"$*\" in *@10.89.77.13*) "
                                 "echo 'Permission denied (publickey).' >&2; exit 255;; esac\nexit 0\n" % log)
    os.chmod(bin_dir / "ssh", 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    targets = [{"name": "w1", "address": "10.89.77.12"}, {"name": "w2", "address": "10.89.77.13"}]
    for check_mode in (False, True):
        result = probe(run_module, tool, recorded, verify=True, verify_targets=targets, connect_timeout=7,
                       check_mode=check_mode)
        assert [(c["item"], c["address"], c["rc"]) for c in result["checks"]] == [
            ("w1", "10.89.77.12", 0), ("w2", "10.89.77.13", 255)]
        assert result["differences"] == ["SSH to w2 (10.89.77.13): rc 255, Permission denied (publickey)."]
        assert not result["measure"]
    lines = log.read_text().splitlines()
    assert lines[0] == "-o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=7 %s@10.89.77.12 true" % USER
    assert len(lines) == 4
    assert probe(run_module, tool, recorded)["checks"] == []  # verify false: no ssh


def test_an_unknown_user_is_named(run_module, tool):
    result = run_module(network_gate_probe, {"user": "no-such-user-laguna", "tool_path": tool})
    assert result.failed and "no-such-user-laguna is not a user on this node" in result["msg"]


def test_the_role_acts_only_on_what_the_probe_found():
    """The role's tasks after the probe: every task that reaches a node is gated on the probe's result,
    and the SSH check's timeout falls back to ssh_mesh's own default."""
    tasks_dir = os.path.join(ROOT, "roles", "network_gate", "tasks")
    with open(os.path.join(tasks_dir, "main.yml")) as handle:
        main = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "roles", "ssh_mesh", "defaults", "main.yml")) as handle:
        ssh_defaults = yaml.safe_load(handle)
    probe_task = next(t for t in main if "laguna.spark.network_gate_probe" in t)
    assert "default(%d)" % ssh_defaults["ssh_mesh_connect_timeout"] in probe_task["laguna.spark.network_gate_probe"][
        "connect_timeout"]
    measure = next(t for t in main if t.get("ansible.builtin.include_tasks") == "measure.yml")
    assert "network_gate_probe.tool_missing or network_gate_probe.measure" in measure["when"]
    assert not any("ssh_mesh" in str(t.get("ansible.builtin.include_role", {})) for t in main)
    with open(os.path.join(tasks_dir, "measure.yml")) as handle:
        acting = yaml.safe_load(handle)
    assert "network_gate_probe.tool_missing" in acting[0]["when"]
    assert acting[1]["when"] == "laguna_is_head and network_gate_probe.measure"
    # The record is forgotten before measuring and written only after the gate passed.
    names = [t["name"] for t in acting[1]["block"]]
    assert names[0] == "Forget the last measurement" and names[-1] == "Record the measurement that passed"
    assert names.index("The link is fast enough") < names.index("Record the measurement that passed")


def test_record_differences_is_empty_for_the_same_inputs():
    planned = perftest.plan("ib_write_bw", node("h", 1), [node("w", 2)])
    wanted = network_gate.record_inputs("ib_write_bw", planned, 90)
    text = json.dumps({"inputs": copy.deepcopy(wanted)})
    assert network_gate.record_differences("r", text, wanted) == []
