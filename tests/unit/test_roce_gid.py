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
