"""ib_bw_check / module_utils.perftest on recorded outputs (tests/doubles/recorded, see its README)."""
import os

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import perftest
from ansible_collections.laguna.spark.plugins.modules import ib_bw_check
from helpers import DOUBLES

REC = os.path.join(DOUBLES, "recorded")


def rec(*parts):
    with open(os.path.join(REC, *parts)) as fh:
        return fh.read()


def twin(name, netdev, mtu=9000):
    return {"name": name, "port": 1, "netdev": netdev, "state": "4: ACTIVE", "rate": "200 Gb/sec (4X HDR)",
            "mtu": mtu, "pcie_speed": "32.0 GT/s PCIe", "pcie_width": "4"}


def node(host, last, gid=3, mtu1=9000):
    return {"host": host, "twins": [twin("rocep1s0f1", "enp1s0f1np1"), twin("roceP2p1s0f1", "enP2p1s0f1np1", mtu1)],
            "addresses": ["192.168.100.%d/24" % last, "192.168.101.%d/24" % last], "gid_indexes": [gid, gid]}


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
