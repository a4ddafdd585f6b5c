"""fabric_probe: the fabric role's one read, on a fake Spark tree (two twins), a netplan file and a fake `ip`.

Each kind of difference has its test; on a node as the role wants it the probe
finds none, so the role's netplan tasks do not run.
"""
import os

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import fabric, fabric_probe
from ansible_collections.laguna.spark.plugins.modules import fabric_probe as fabric_probe_module
from helpers.fake_bin import on_path
from helpers.sysfs import spark

TWIN0, TWIN1 = "enp1s0f1np1", "enP2p1s0f1np1"
ADDRESSES = {TWIN0: "192.168.100.1/24", TWIN1: "192.168.101.1/24"}


def ip_output(addresses):
    """`ip -4 -o addr show` as iproute2 prints it, for {netdev: [a.b.c.d/p, ...]}."""
    lines = ["1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever"]
    for n, (netdev, addrs) in enumerate(sorted(addresses.items()), start=4):
        for addr in addrs:
            lines.append("%d: %s    inet %s brd 192.168.255.255 scope global %s\\       valid_lft forever "
                         "preferred_lft forever" % (n, netdev, addr, netdev))
    return "\n".join(lines) + "\n"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A Spark as the role leaves it: both twins at MTU 9000, up, carrying their addresses, the netplan file written."""
    ib, net = spark(tmp_path / "sys")
    for netdev in ADDRESSES:
        (tmp_path / "sys" / "net" / netdev / "flags").write_text("0x1003\n")

    class Node:
        netplan = tmp_path / "60-laguna-fabric.yaml"

        def ip(self, addresses):
            out = tmp_path / "ip-out"
            out.write_text(ip_output(addresses))
            on_path(monkeypatch, tmp_path / "bin", {"ip": "#!/bin/sh\ncat %s\n" % out})

        def set(self, netdev, attr, value):
            (tmp_path / "sys" / "net" / netdev / attr).write_text("%s\n" % value)

        def probe(self, run_module, check_mode=False, **kw):
            args = dict(sysfs_infiniband=ib, sysfs_net=net, address="192.168.100.1", hca_hint="rocep1s0f1",
                        netplan_file=str(self.netplan))
            args.update(kw)
            return run_module(fabric_probe_module, args, check_mode=check_mode)

    n = Node()
    n.ip({k: [v] for k, v in ADDRESSES.items()})
    twins = [{"netdev": TWIN0}, {"netdev": TWIN1}]
    n.netplan.write_text(fabric.render_netplan(twins, [ADDRESSES[TWIN0], ADDRESSES[TWIN1]], 9000))
    return n


def test_a_node_as_wanted_has_no_difference(node, run_module):
    result = node.probe(run_module)
    assert not result.failed, result
    assert result["differences"] == []
    assert (result["netplan_write"], result["netplan_apply"], result["netplan_managed"]) == (False, False, True)
    assert result["netplan_checksum"] == result["netplan_wanted_checksum"]
    assert [(lk["netdev"], lk["mtu"], lk["operstate"], lk["admin_up"], lk["addresses"]) for lk in result["links"]] == [
        (TWIN0, 9000, "up", True, ["192.168.100.1/24"]), (TWIN1, 9000, "up", True, ["192.168.101.1/24"])]
    assert result["links"][1]["summary"] == "enP2p1s0f1np1: MTU 9000, up, inet 192.168.101.1/24"
    # The discovery's keys, as rdma_netdev_info's (discover.yml's fabric_facts)
    assert result["hcas"] == ["rocep1s0f1", "roceP2p1s0f1"] and result["gid_policy"] == "nccl"
    assert result["gid_indexes"] == [3, 3] and result["gids_deferred"] is False
    assert result["changed"] is False
    assert node.probe(run_module, check_mode=True)["differences"] == []


def test_the_second_twin_at_mtu_1500_is_applied_again(node, run_module):
    """Issue 20's drift: the second twin's MTU back at 1500, the file untouched: apply, do not write."""
    node.set(TWIN1, "mtu", 1500)
    result = node.probe(run_module)
    assert result["differences"] == ["enP2p1s0f1np1: MTU 1500, wanted 9000"]
    assert (result["netplan_write"], result["netplan_apply"]) == (False, True)
    assert result["links"][0]["differences"] == [] and result["links"][1]["differences"] == result["differences"]


def test_the_first_twin_mtu_and_a_wanted_mtu_change(node, run_module):
    node.set(TWIN0, "mtu", 1500)
    assert node.probe(run_module)["differences"] == ["enp1s0f1np1: MTU 1500, wanted 9000"]
    node.set(TWIN0, "mtu", 9000)
    result = node.probe(run_module, mtu=4200)  # the inventory changed: the document and both MTUs differ
    assert result["netplan_write"] and result["differences"][1:] == [
        "enp1s0f1np1: MTU 9000, wanted 4200", "enP2p1s0f1np1: MTU 9000, wanted 4200"]


def test_a_netplan_file_that_differs_is_written_and_applied(node, run_module):
    node.netplan.write_text(node.netplan.read_text().replace("mtu: 9000", "mtu: 1500"))
    result = node.probe(run_module)
    assert (result["netplan_write"], result["netplan_apply"], result["netplan_exists"]) == (True, True, True)
    assert len(result["differences"]) == 1
    assert result["differences"][0].startswith("%s: sha256 %s, wanted %s" % (
        node.netplan, result["netplan_checksum"][:12], result["netplan_wanted_checksum"][:12]))


def test_a_missing_netplan_file(node, run_module):
    os.unlink(str(node.netplan))
    result = node.probe(run_module)
    assert result["differences"] == ["%s: missing, to write" % node.netplan]
    assert (result["netplan_write"], result["netplan_exists"], result["netplan_checksum"]) == (True, False, None)


def test_a_twin_without_its_address(node, run_module):
    """The second twin lost its address (and so its RoCE v2 GID would go too): apply; NCCL's check waits."""
    node.ip({TWIN0: [ADDRESSES[TWIN0]], TWIN1: ["10.0.0.9/24"]})
    result = node.probe(run_module)
    assert result["differences"] == ["enP2p1s0f1np1: does not carry 192.168.101.1/24 (has: 10.0.0.9/24)"]
    node.ip({TWIN0: [ADDRESSES[TWIN0]]})
    assert node.probe(run_module)["differences"] == ["enP2p1s0f1np1: does not carry 192.168.101.1/24 (has: none)"]


def test_a_twin_set_down_by_hand(node, run_module):
    node.set(TWIN0, "flags", "0x1002")
    node.set(TWIN0, "operstate", "down")
    result = node.probe(run_module)
    assert result["differences"] == ["enp1s0f1np1: administratively down, wanted up"]
    assert result["links"][0]["summary"] == "enp1s0f1np1: MTU 9000, down, administratively down, inet 192.168.100.1/24"
    # Down without the carrier (the cable), not by hand: netplan cannot fix it, nothing to apply.
    node.set(TWIN0, "flags", "0x1003")
    assert node.probe(run_module)["differences"] == []


def test_a_twin_netdev_gone(node, run_module, tmp_path):
    import shutil
    shutil.rmtree(str(tmp_path / "sys" / "net" / TWIN1))
    result = node.probe(run_module)
    assert "enP2p1s0f1np1: no such netdev" in result["differences"] and result["netplan_apply"]


def test_no_gid_policy_waits_for_the_apply_and_fails_without_one(node, run_module, tmp_path):
    """No GID fits (the second twin's GID table has no RoCE v2 GID of its address): when the netplan
    is about to be applied the probe says so and does not fail; with nothing to apply it fails with
    rdma_netdev_info's message."""
    gids = tmp_path / "sys" / "ib" / "roceP2p1s0f1" / "ports" / "1" / "gid_attrs" / "types"
    for name in os.listdir(str(gids)):
        (gids / name).write_text("IB/RoCE v1\n")
    result = node.probe(run_module)
    assert result.failed and "No GID policy (auto)" in result["msg"]
    node.set(TWIN1, "mtu", 1500)
    result = node.probe(run_module)
    assert not result.failed and result["gids_deferred"] is True and result["gid_policy"] is None
    assert result["differences"] == ["enP2p1s0f1np1: MTU 1500, wanted 9000"]


def test_a_fake_tree_is_not_compared(run_module, tmp_path):
    """No PCI device behind the twin (the containers): the role leaves netplan alone, nothing differs,
    but the twin's netdev is read."""
    from helpers.sysfs import make_port, mapped
    root = make_port(tmp_path / "ib", {3: (mapped("10.89.77.12"), "RoCE v2")}, ndev="eth0")
    net = tmp_path / "net" / "eth0"
    net.mkdir(parents=True)
    (net / "mtu").write_text("1500\n")
    result = run_module(fabric_probe_module, dict(sysfs_infiniband=root, sysfs_net=str(tmp_path / "net"),
                                                  address="10.89.77.12", hca_hint="rocep1s0f1",
                                                  netplan_file=str(tmp_path / "none.yaml")))
    assert not result.failed, result
    assert (result["hardware"], result["netplan_managed"], result["differences"]) == (False, False, [])
    assert result["links"][0]["mtu"] == 1500 and result["links"][0]["differences"] == []


def test_without_netplan_file_it_only_discovers(node, run_module):
    node.set(TWIN1, "mtu", 1500)
    result = node.probe(run_module, netplan_file=None)
    assert (result["differences"], result["links"], result["netplan_apply"]) == ([], [], False)


def test_parse_ip_addresses():
    text = ip_output({"eth0": ["10.0.0.1/24", "10.0.1.1/24"]}) + "7: vlan5@eth0    inet 10.5.0.1/16 scope global\n"
    assert fabric_probe.parse_ip_addresses(text) == {
        "lo": ["127.0.0.1/8"], "eth0": ["10.0.0.1/24", "10.0.1.1/24"], "vlan5": ["10.5.0.1/16"]}
    assert fabric_probe.parse_ip_addresses("") == {}


def test_the_current_file_is_returned_only_for_an_apply(node, run_module):
    """The rollback copy's content: the file as it is, when the role applies; not otherwise."""
    assert node.probe(run_module)["netplan_current"] is None
    node.set(TWIN1, "mtu", 1500)
    assert node.probe(run_module)["netplan_current"] == node.netplan.read_text()


def test_it_resolves_the_gid_index_as_roce_gid_does_in_the_same_call(node, run_module, tmp_path):
    # fabric_env's one call: the discovery and this node's RoCE v2 GID index of its address.
    from ansible_collections.laguna.spark.plugins.module_utils import roce
    ib = str(tmp_path / "sys" / "ib")
    result = node.probe(run_module, netplan_file=None, resolve_gid_type=roce.ROCE_V2)
    assert not result.failed, result
    found, failure = roce.resolve(ib, result["hcas"][0], 1, "192.168.100.1", roce.ROCE_V2)
    assert failure is None and result["roce_gid"] == found and found["gid_index"] == 3
    assert "roce_gid" not in node.probe(run_module, netplan_file=None)
    # No RoCE v2 GID maps the address: roce_gid's sentence.
    types = tmp_path / "sys" / "ib" / result["hcas"][0] / "ports" / "1" / "gid_attrs" / "types"
    for name in os.listdir(str(types)):
        (types / name).write_text("IB/RoCE v1\n")
    failed = node.probe(run_module, netplan_file=None, check_gids=False, resolve_gid_type=roce.ROCE_V2)
    assert failed.failed and failed["msg"].startswith("No RoCE v2 GID on %s port 1 maps 192.168.100.1. GIDs seen: "
                                                      % result["hcas"][0])
