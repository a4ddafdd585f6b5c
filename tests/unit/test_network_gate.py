"""ib_bw_check / module_utils.perftest on recorded outputs (tests/doubles/recorded, see its README); what
network_gate reads of the other nodes (module_utils.peers, the fabric_nodes filter)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import peers, perftest
from ansible_collections.laguna.spark.plugins.modules import ib_bw_check
from helpers import DOUBLES
from helpers.sysfs import fabric_node as node
from helpers.collection import collections_path

REC = os.path.join(DOUBLES, "recorded")


def rec(*parts):
    with open(os.path.join(REC, *parts)) as fh:
        return fh.read()


def test_parse_ib_write_bw():
    r = perftest.parse_ib_write_bw(rec("perftest", "ib_write_bw_twin0_ok.txt"))
    assert (r["device"], r["gid_index"], r["link_type"], r["mtu"]) == ("rocep1s0f1", 3, "Ethernet", 4096)
    assert (r["bytes"], r["iterations"], r["average_gbps"], r["peak_gbps"]) == (1048576, 56312, 96.74, 0.0)


def test_parse_mib_converts_to_gbps():
    r = perftest.parse_ib_write_bw(rec("perftest", "ib_write_bw_mib.txt"))
    assert r["average_gbps"] == pytest.approx(11498.12 * 1048576 * 8 / 1e9, abs=0.01)


def test_parse_all_gather():
    r = perftest.parse_all_gather(rec("nccl-tests", "all_gather_perf_two_sparks.txt"))
    assert r["busbw_gbytes"] == 11.7113 and r["average_gbps"] == 93.69 and r["out_of_bounds"] == 0


def test_parse_errors():
    with pytest.raises(ValueError):
        perftest.parse_ib_write_bw("Couldn't connect to 192.168.100.2:18515\n")
    with pytest.raises(ValueError):
        perftest.parse_all_gather("# nThread 1\n")


def test_exact_command_lines(run_module):
    result = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2, gid=5)]})
    assert not result.failed
    first, second = result["pairs"]
    assert first["server_argv"] == ["ib_write_bw", "-d", "rocep1s0f1", "-i", "1", "-x", "5", "-p", "18515", "-D", "5",
                                    "-s", "1048576", "-q", "4", "-F", "--report_gbits"]
    assert first["client_argv"] == ["ib_write_bw", "-d", "rocep1s0f1", "-i", "1", "-x", "3", "-p", "18515", "-D", "5",
                                    "-s", "1048576", "-q", "4", "-F", "--report_gbits", "192.168.100.2"]
    assert second["client_argv"][2] == "roceP2p1s0f1" and second["client_argv"][-1] == "192.168.101.2"
    assert second["server_argv"][8] == "18516"
    # Every server starts at once, the clients run one after the other: the second server waits through the first.
    assert first["client_command"] == ["timeout", "65"] + first["client_argv"]
    assert second["client_command"] == ["timeout", "65"] + second["client_argv"]
    assert first["server_command"] == ["timeout", "65"] + first["server_argv"] and first["server_async"] == 95
    assert second["server_command"] == ["timeout", "130"] + second["server_argv"] and second["server_async"] == 160
    assert result["threshold_total"] == 180.0
    assert "measurements" not in result


def test_all_gather_command_line(run_module):
    result = run_module(ib_bw_check, {"tool": "all_gather_perf", "head": node("head", 1), "workers": [node("w1", 2)],
                                      "nccl_env": {"NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1"}})
    assert result["argv"] == ["mpirun", "-np", "2", "-H", "192.168.100.1:1,192.168.100.2:1",
                              "-x", "NCCL_IB_HCA==rocep1s0f1:1,roceP2p1s0f1:1",
                              "all_gather_perf", "-b", "1G", "-e", "1G", "-f", "2", "-g", "1", "-n", "20"]


def test_both_twins_fast_pass(run_module):
    outputs = [rec("perftest", "ib_write_bw_twin0_ok.txt"), rec("perftest", "ib_write_bw_twin1_ok.txt")]
    result = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2)], "outputs": outputs})
    assert not result.failed, result.get("msg")
    assert result["totals"] == {"w1": 192.62}
    assert [m["device"] for m in result["measurements"]] == ["rocep1s0f1", "roceP2p1s0f1"]


def test_slow_twin_fails_with_figure_threshold_and_diagnosis(run_module):
    outputs = [rec("perftest", "ib_write_bw_twin0_ok.txt"), rec("perftest", "ib_write_bw_twin1_slow.txt")]
    result = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2, mtu1=1500)],
                                      "outputs": outputs})
    assert result.failed
    assert "roceP2p1s0f1 <-> w1 roceP2p1s0f1: 41.27 Gb/s < 90.00 Gb/s per device" in result["msg"]
    assert "worker roceP2p1s0f1 (enP2p1s0f1np1): port rate 200 Gb/sec (4X HDR), MTU 1500 < 9000, PCIe x4 at 32.0 GT/s PCIe" in result["msg"]
    assert "head <-> w1: 138.01 Gb/s in total < 180.00 Gb/s" in result["msg"]


def test_one_twin_only_misses_the_total(run_module):
    result = run_module(ib_bw_check, {"tool": "all_gather_perf", "head": node("head", 1), "workers": [node("w1", 2)],
                                      "outputs": [rec("nccl-tests", "all_gather_perf_two_sparks.txt")]})
    assert result.failed and "head <-> w1: 93.69 Gb/s in total < 180.00 Gb/s" in result["msg"]


def test_threshold_is_a_parameter_and_output_count_checked(run_module):
    outputs = [rec("perftest", "ib_write_bw_twin0_ok.txt"), rec("perftest", "ib_write_bw_twin1_slow.txt")]
    ok = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2)], "outputs": outputs,
                                  "min_gbps_per_device": 40, "min_gbps_total": 130})
    assert not ok.failed
    bad = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2)], "outputs": outputs[:1]})
    assert bad.failed and "1 outputs for 2 planned tests" in bad["msg"]
    junk = run_module(ib_bw_check, {"head": node("head", 1), "workers": [node("w1", 2)], "outputs": ["x", "y"]})
    assert junk.failed and "cannot read the bandwidth report" in junk["msg"]


# --- What a node reads of the other nodes (module_utils/peers.py) -------------------

def facts_of(hostvars):
    return lambda host: hostvars[host]


def test_a_peer_that_failed_earlier_is_named_in_one_sentence():
    hostvars = {"head": {"fabric_facts": {}}, "w1": {}, "w2": {"fabric_facts": {}}}
    message = peers.unready("head", ["head", "w1", "w2"], facts_of(hostvars), ["head", "w2"], ["head", "w1", "w2"],
                            "network_gate", ["fabric_facts"])
    assert message == ("w1 failed earlier in this run (its error is above), so network_gate on head stops here "
                       "(it needs w1's fabric_facts): fix what failed on w1 and rerun.")
    two = peers.unready("w2", ["head", "w1", "w3"], facts_of(hostvars), ["w2"], ["head", "w1", "w2", "w3"],
                        "ssh_mesh", ["ssh_mesh_pubkey", "ssh_mesh_hostkeys"])
    assert two.startswith("head, w1 and w3 failed earlier in this run (their errors are above), so ssh_mesh on w2 "
                          "stops here (it needs head, w1 and w3's ssh_mesh_pubkey, ssh_mesh_hostkeys): fix what "
                          "failed on head, w1 and w3 and rerun.")
    # No facts asked: only whether the host is still in the play.
    assert peers.unready("w1", ["head"], facts_of({}), ["w1"], ["head", "w1"], "staging") == (
        "head failed earlier in this run (its error is above), so staging on w1 stops here: "
        "fix what failed on head and rerun.")


def test_a_peer_in_the_play_without_the_facts_and_peers_outside_the_play():
    hostvars = {"head": {"fabric_facts": {}}, "w1": {"other": 1}}
    message = peers.unready("head", ["head", "w1"], facts_of(hostvars), ["head", "w1"], ["head", "w1"],
                            "network_gate", ["fabric_facts"])
    assert message == ("w1 did not get that far in this run (no fabric_facts on w1), so network_gate on head stops "
                       "here: run every node through the roles before network_gate (no --tags or condition that "
                       "skips them on w1), then rerun.")
    # --limit head: the worker is not in the play and is not checked; the node itself never is.
    assert peers.unready("head", ["head", "w1"], facts_of({}), ["head"], ["head"], "network_gate",
                         ["fabric_facts"]) == ""
    assert peers.unready("head", ["head", "w1"], facts_of(dict(hostvars, w1={"fabric_facts": {}})),
                         ["head", "w1"], ["head", "w1"], "network_gate", ["fabric_facts"]) == ""


def fabric(hardware=False, **more):
    return dict({"hcas": ["rocep1s0f1"], "hardware": hardware, "gid_indexes": [3]}, **more)


def test_fabric_nodes_is_what_the_role_computed_in_jinja():
    hostvars = {"head": {"fabric_facts": fabric(True)}, "w1": {"fabric_facts": fabric()},
                "w2": {"fabric_facts": fabric(True)}, "w3": {}}
    view = peers.fabric_nodes(facts_of(hostvars), "head", ["w1", "w2", "w3"], ["head", "w1", "w2"])
    assert view == {"nodes": ["head", "w1", "w2"], "fake": ["w1"],
                    "head": dict(fabric(True), host="head"),
                    "workers": [dict(fabric(), host="w1"), dict(fabric(True), host="w2")]}
    with pytest.raises(ValueError, match=r"^w3 has no fabric_facts \(did the fabric discovery run on it\?\)$"):
        peers.fabric_nodes(facts_of(hostvars), "head", ["w3"], ["head", "w3"])


def run_controller_plugin(script, payload):
    """Run ``script`` (reads JSON from stdin, prints JSON) in a Python of its own: importing a
    controller plugin switches module warnings to the controller's display for the rest of the process."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), collections_path()],
                          input=json.dumps(payload), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def test_the_fabric_nodes_filter_reads_hostvars_and_names_a_node_without_facts():
    out = run_controller_plugin("""
        import json, sys
        sys.path.insert(0, sys.argv[1])
        from ansible_collections.laguna.spark.plugins.filter.fabric_nodes import FilterModule
        fabric_nodes = FilterModule().filters()["fabric_nodes"]
        out = []
        for args in json.loads(sys.stdin.read()):
            try:
                out.append(fabric_nodes(*args))
            except Exception as exc:  # pylint: disable=broad-except
                out.append("%s: %s" % (type(exc).__name__, exc))
        print(json.dumps(out))
        """, [[{"head": {"fabric_facts": fabric(True)}, "w1": {"fabric_facts": fabric()}}, "head", ["w1"],
               ["head", "w1"]],
              [{"head": {"fabric_facts": fabric(True)}, "w1": {}}, "head", ["w1"], ["head", "w1"]],
              [{"head": {}}, "head", "w1", ["head"]]])
    assert out[0] == {"nodes": ["head", "w1"], "fake": ["w1"], "head": dict(fabric(True), host="head"),
                      "workers": [dict(fabric(), host="w1")]}
    assert out[1].startswith("Ansible") and out[1].endswith(
        ": fabric_nodes: w1 has no fabric_facts (did the fabric discovery run on it?)")
    assert out[2].endswith(": fabric_nodes: the workers and the play's hosts must be lists of inventory names")
