"""rdma_netdev_info / module_utils.fabric on fake sysfs trees with one twin and with two."""
import os

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import fabric
from ansible_collections.laguna.spark.plugins.modules import rdma_netdev_info
from helpers.sysfs import FE80, gid_table as table, make_port, mapped, spark


def run(run_module, ib, net, **kw):
    args = dict(sysfs_infiniband=ib, sysfs_net=net, address="192.168.100.1", hca_hint="rocep1s0f1")
    args.update(kw)
    return run_module(rdma_netdev_info, args)


def test_two_twins_found_with_netdevs_and_links(tmp_path, run_module):
    ib, net = spark(tmp_path)
    result = run(run_module, ib, net)
    assert not result.failed, result
    assert result["hcas"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert result["netdevs"] == ["enp1s0f1np1", "enP2p1s0f1np1"]
    assert result["addresses"] == ["192.168.100.1/24", "192.168.101.1/24"]
    assert result["hardware"] is True
    twin = result["twins"][1]
    assert (twin["pci"], twin["mtu"], twin["pcie_width"], twin["state"]) == ("0002:01:00.1", 9000, "4", "4: ACTIVE")
    # both twins carry their own address: NCCL's own per-device choice is right
    assert result["gid_policy"] == "nccl"
    assert [c["nccl_index"] for c in result["gid_checks"]] == [3, 3]
    # The fabric role's fabric_facts.gid_indexes (network_gate's ib_write_bw -x): each twin's own.
    assert result["gid_indexes"] == [c["wanted_index"] for c in result["gid_checks"]] == [3, 3]
    assert result["nccl_env"] == {"NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1"}
    assert run(run_module, ib, net, check_gids=False)["gid_indexes"] == []


def test_the_cable_decides_not_the_hint(tmp_path, run_module):
    ib, net = spark(tmp_path, cabled="f0")
    result = run(run_module, ib, net)
    assert result["hcas"] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert result["note"] == "laguna_hca is rocep1s0f1, but the cabled port is rocep1s0f0+roceP2p1s0f0"


def test_twin_without_ipv4_gets_a_link_local_gid_from_nccl(tmp_path, run_module):
    """The case of the issue: a twin with no IPv4 address has no IPv4-mapped
    GID, NCCL's own choice there is index 0 (fe80, RoCE v1), and no single
    NCCL_IB_GID_INDEX fits both twins: the module refuses."""
    ib, net = spark(tmp_path, twin1_address=None)
    result = run(run_module, ib, net, check_gids=True)
    assert result.failed
    checks = {c["device"]: c for c in result["gid_checks"]}
    assert checks["roceP2p1s0f1"]["nccl_index"] == 0
    assert checks["roceP2p1s0f1"]["nccl_gid_type"] == "IB/RoCE v1"
    assert checks["roceP2p1s0f1"]["wanted_index"] is None
    assert "roceP2p1s0f1 wants 192.168.101.1 (RoCE v2 GID index None), NCCL would pick 0" in result["msg"]


def test_an_extra_address_first_pins_a_common_index(tmp_path, run_module):
    """NCCL keeps the first IPv4 RoCE v2 GID: an older address on twin 0
    makes its own choice wrong. Twin 0's right GID is then 5, twin 1's 3:
    no common index, so NCCL_IB_ADDR_RANGE it is."""
    ib, net = spark(tmp_path, extra="10.0.0.7")
    result = run(run_module, ib, net)
    assert not result.failed, result["msg"] if result.failed else ""
    assert result["gid_policy"] == "range"
    assert result["nccl_env"]["NCCL_IB_ADDR_RANGE"] == "192.168.100.0/23"
    assert [c["nccl_index"] for c in result["gid_checks"]] == [5, 3]
    assert result["gid_indexes"] == [c["wanted_index"] for c in result["gid_checks"]]
    assert "NCCL_IB_GID_INDEX" not in result["nccl_env"]


def test_one_twin_with_extra_address_is_pinned(tmp_path, run_module):
    """A fake tree (no PCI device) has one twin; molecule's worker layout."""
    root = make_port(tmp_path / "ib", table("10.89.77.12", extra="10.0.0.7"))
    result = run(run_module, root, str(tmp_path / "net"), address="10.89.77.12", hca_hint="rocep1s0f1")
    assert result["hcas"] == ["rocep1s0f1"] and result["hardware"] is False
    assert result["note"] == "the state of rocep1s0f1 is unreadable; taken as the cabled port"
    assert result["gid_checks"][0]["nccl_index"] == 3  # 10.0.0.7: NCCL alone would be wrong
    assert result["gid_policy"] == "pinned"
    assert result["nccl_env"] == {"NCCL_IB_HCA": "=rocep1s0f1:1", "NCCL_IB_GID_INDEX": "5"}


def test_forced_nccl_policy_fails_when_wrong(tmp_path, run_module):
    root = make_port(tmp_path / "ib", table("10.89.77.12", extra="10.0.0.7"))
    (tmp_path / "ib" / "rocep1s0f1" / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    result = run(run_module, root, str(tmp_path / "net"), address="10.89.77.12", gid_policy="nccl")
    assert result.failed and "No GID policy (nccl)" in result["msg"]


def test_no_active_port(tmp_path, run_module):
    ib, net = spark(tmp_path)
    for name in os.listdir(ib):
        with open(os.path.join(ib, name, "ports", "1", "state"), "w") as fh:
            fh.write("1: DOWN\n")
    result = run(run_module, ib, net)
    assert result.failed and "no RDMA port is ACTIVE" in result["msg"]
    assert "rocep1s0f1 port 1: 1: DOWN" in result["msg"]


def test_explicit_addresses_and_bounds(tmp_path, run_module):
    ib, net = spark(tmp_path, twin1_address="10.10.10.1")
    result = run(run_module, ib, net, twin_addresses=["192.168.100.1/24", "10.10.10.1"], prefix=30)
    assert result["addresses"] == ["192.168.100.1/24", "10.10.10.1/30"]
    assert run(run_module, ib, net, mtu=65536).failed


def test_netplan_document(tmp_path):
    twins = [{"netdev": "enp1s0f1np1"}, {"netdev": "enP2p1s0f1np1"}]
    text = fabric.render_netplan(twins, ["192.168.100.1/24", "192.168.101.1/24"], 9000)
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(text)["network"]
    assert doc["version"] == 2 and "renderer" not in doc
    assert doc["ethernets"]["enP2p1s0f1np1"] == {
        "dhcp4": False, "dhcp6": False, "accept-ra": False, "mtu": 9000, "addresses": ["192.168.101.1/24"]}
    assert yaml.safe_load(fabric.render_netplan(twins[:1], ["10.0.0.1/30"], renderer="networkd"))["network"]["renderer"] == "networkd"


@pytest.mark.parametrize("gids,expected", [
    (table("192.168.100.1"), 3),
    (table("192.168.100.1", extra="10.0.0.7"), 3),
    (table(None), 0),
    # v2 before v1 in the table: NCCL still ends on the v2 one
    ({0: (FE80, "IB/RoCE v1"), 1: (mapped("192.168.100.1"), "RoCE v2"), 2: (mapped("192.168.100.1"), "IB/RoCE v1")}, 1),
])
def test_nccl_gid_index(gids, expected):
    assert fabric.nccl_gid_index(gids, max(gids) + 2) == expected


def test_nccl_gid_index_with_range_and_version():
    gids = table("192.168.100.1", extra="10.0.0.7")
    assert fabric.nccl_gid_index(gids, 8, addr_range="192.168.100.0/24") == 5
    assert fabric.nccl_gid_index(gids, 8, roce_version=1, addr_range="192.168.100.0/24") == 4


def test_plan_addresses():
    assert fabric.plan_addresses("192.168.100.2", 24, 2) == ["192.168.100.2/24", "192.168.101.2/24"]
    assert fabric.plan_addresses("10.0.0.1", 30, 2) == ["10.0.0.1/30", "10.0.0.5/30"]
    with pytest.raises(ValueError):
        fabric.plan_addresses("10.0.0.1", 30, 2, ["10.0.0.1"])
    assert fabric.covering_range(["192.168.100.1/24", "192.168.101.1/24"]) == "192.168.100.0/23"
