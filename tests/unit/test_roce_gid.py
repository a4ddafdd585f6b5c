import subprocess

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import roce
from ansible_collections.laguna.spark.plugins.modules import roce_gid
from helpers.sysfs import HCA, make_port, mapped

SPARK_A = {
    0: ("fe80:0000:0000:0000:4ebb:47ff:fe0a:1b2c", "IB/RoCE v1"),
    1: ("fe80:0000:0000:0000:4ebb:47ff:fe0a:1b2c", "RoCE v2"),
    2: (mapped("192.168.100.10"), "IB/RoCE v1"),
    3: (mapped("192.168.100.10"), "RoCE v2"),
}
# The other node: an extra address came first, so its index is not 3.
SPARK_B = {
    0: ("fe80:0000:0000:0000:4ebb:47ff:fe0a:9f01", "IB/RoCE v1"),
    1: ("fe80:0000:0000:0000:4ebb:47ff:fe0a:9f01", "RoCE v2"),
    2: (mapped("10.0.0.7"), "IB/RoCE v1"),
    3: (mapped("10.0.0.7"), "RoCE v2"),
    4: (mapped("192.168.100.11"), "IB/RoCE v1"),
    5: (mapped("192.168.100.11"), "RoCE v2"),
}


def test_picks_the_roce_v2_gid_of_the_address(tmp_path, run_module):
    root = make_port(tmp_path, SPARK_A)
    result = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.10", "sysfs_root": root})
    assert not result["changed"]
    assert result["gid_index"] == 3
    assert result["gid"] == mapped("192.168.100.10")
    assert result["ndev"] == "enp1s0f1np1"
    assert [g["index"] for g in result["gids"]] == [0, 1, 2, 3]


def test_index_differs_per_node(tmp_path, run_module):
    root = make_port(tmp_path, SPARK_B)
    result = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.11", "sysfs_root": root})
    assert result["gid_index"] == 5


def test_v1_only_does_not_match_v2_but_can_be_asked_for(tmp_path, run_module):
    root = make_port(tmp_path, {0: (mapped("192.168.100.10"), "IB/RoCE v1")})
    result = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.10", "sysfs_root": root})
    assert result.failed
    result = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.10", "sysfs_root": root,
                                   "gid_type": "IB/RoCE v1"})
    assert result["gid_index"] == 0


def test_no_match_lists_what_was_seen(tmp_path, run_module):
    root = make_port(tmp_path, SPARK_B)
    result = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.10", "sysfs_root": root})
    assert result.failed
    assert "No RoCE v2 GID on rocep1s0f1 port 1 maps 192.168.100.10" in result["msg"]
    assert "5=0000:0000:0000:0000:0000:ffff:c0a8:640b [RoCE v2] ipv4=192.168.100.11" in result["msg"]
    assert len(result["gids"]) == 6


def test_wrong_hca_or_port_names_the_devices_present(tmp_path, run_module):
    root = make_port(tmp_path, SPARK_A)
    result = run_module(roce_gid, {"hca": "mlx5_9", "address": "192.168.100.10", "sysfs_root": root})
    assert result.failed and "Devices present: rocep1s0f1" in result["msg"]
    result = run_module(roce_gid, {"hca": HCA, "port": 2, "address": "192.168.100.10", "sysfs_root": root})
    assert result.failed and "port 2" in result["msg"]


def test_bad_address(tmp_path, run_module):
    root = make_port(tmp_path, SPARK_A)
    result = run_module(roce_gid, {"hca": HCA, "address": "spark-1", "sysfs_root": root})
    assert result.failed and "not an IPv4 address" in result["msg"]


def test_empty_and_junk_gids_are_skipped(tmp_path):
    root = make_port(tmp_path, {1: ("garbage", "RoCE v2"), 2: (mapped("192.168.100.10"), "RoCE v2")})
    entries = roce.scan_gids(root, HCA, 1)
    assert [e["index"] for e in entries] == [2]


def test_ipv4_of_gid():
    assert roce.ipv4_of_gid(mapped("192.168.100.10")) == "192.168.100.10"
    assert roce.ipv4_of_gid("fe80::1") is None
    assert roce.ipv4_of_gid("") is None


def _run_script(tmp_path, script):
    path = tmp_path / "start-env"
    path.write_text(script)
    out = tmp_path / "run" / "laguna-spark" / "unit.env"
    proc = subprocess.run(["/bin/sh", str(path), str(out)], capture_output=True, text=True, check=False)
    return proc, (out.read_text() if out.exists() else None)


@pytest.mark.parametrize("table, address", [(SPARK_A, "192.168.100.10"), (SPARK_B, "192.168.100.11")])
def test_the_start_script_resolves_the_index_the_module_resolves(tmp_path, run_module, table, address):
    root = make_port(tmp_path / "sys", table, slots=12)
    result = run_module(roce_gid, {"hca": HCA, "address": address, "sysfs_root": root})
    proc, written = _run_script(tmp_path, result["start_env_script"])
    assert proc.returncode == 0, proc.stderr
    assert written == "NCCL_IB_GID_INDEX=%d\n" % result["gid_index"]


def test_the_start_script_follows_the_address_when_the_table_changes(tmp_path, run_module):
    # The address moves from index 5 to index 10 (after a reboot, say): the
    # script, written once, finds 10 at the next start; numeric order, not
    # the shell's (10 sorts before 5 as text, and 3/5 are v1 there).
    root = make_port(tmp_path / "sys", SPARK_B, slots=12)
    script = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.11", "sysfs_root": root})["start_env_script"]
    moved = dict(SPARK_B)
    moved[4] = moved[5] = ("0000:0000:0000:0000:0000:0000:0000:0000", None)
    moved[10] = (mapped("192.168.100.11"), "RoCE v2")
    moved[11] = (mapped("192.168.100.11"), "RoCE v2")
    moved[9] = (mapped("192.168.100.11"), "IB/RoCE v1")
    make_port(tmp_path / "sys", moved, slots=12)
    proc, written = _run_script(tmp_path, script)
    assert proc.returncode == 0 and written == "NCCL_IB_GID_INDEX=10\n"
    assert roce.find_gid(roce.scan_gids(root, HCA, 1), "192.168.100.11")["index"] == 10


def test_the_start_script_fails_saying_what_it_wanted_when_no_gid_maps_the_address(tmp_path, run_module):
    root = make_port(tmp_path / "sys", SPARK_A)
    script = run_module(roce_gid, {"hca": HCA, "address": "192.168.100.10", "sysfs_root": root})["start_env_script"]
    make_port(tmp_path / "sys", {0: SPARK_A[0], 1: SPARK_A[1]})
    proc, written = _run_script(tmp_path, script)
    assert proc.returncode == 1 and written is None
    assert "no RoCE v2 GID on rocep1s0f1 port 1 maps 192.168.100.10" in proc.stderr
    assert mapped("192.168.100.10") in proc.stderr


def test_gid_sysfs_form_is_the_kernels():
    assert roce.gid_sysfs_form("192.168.100.1") == mapped("192.168.100.1")
