#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_netdev_info
short_description: Find the cabled CX7 port's RDMA twins and netdevs in sysfs, and plan their fabric settings
version_added: "0.2.0"
description:
  - Scans O(sysfs_infiniband) for RDMA devices, picks the port whose state is
    ACTIVE (preferring the group that holds O(hca_hint)) and returns every
    "twin" of it, i.e. every RDMA device with the same PCI bus/device/function
    in another PCI domain (on a DGX Spark, C(rocep1s0f1) and C(roceP2p1s0f1)),
    with its netdev, port state, rate, MTU and PCIe link.
  - Plans one static address per twin (O(address) for the first twin, the
    next subnets for the others, or O(twin_addresses)), renders the netplan
    document that sets them with O(mtu), and works out how NCCL will find the
    right RoCE v2 GID on every twin (O(gid_policy)), by replaying the GID
    choice of NCCL 2.28.9 (the NCCL that torch 2.11.0 and so vLLM 0.25.1 ship).
  - Read-only.
options:
  sysfs_infiniband:
    description: Where RDMA devices appear; a fake tree in tests.
    type: path
    default: /sys/class/infiniband
  sysfs_net:
    description: Where network interfaces appear.
    type: path
    default: /sys/class/net
  port:
    description: RDMA port number of the devices.
    type: int
    default: 1
  hca_hint:
    description: Preferred RDMA device when several ports are ACTIVE; a hint, not an assumption.
    type: str
  address:
    description: This node's IPv4 address on the link (first twin).
    type: str
    required: true
  prefix:
    description: Prefix length of the point-to-point subnets.
    type: int
    default: 24
  twin_addresses:
    description: Explicit addresses, one per twin in PCI domain order; overrides the planned ones.
    type: list
    elements: str
    default: []
  mtu:
    description: MTU of the twins' netdevs.
    type: int
    default: 9000
  renderer:
    description: Netplan renderer to name in the document (none keeps the system default).
    type: str
  gid_policy:
    description:
      - C(nccl) leaves C(NCCL_IB_GID_INDEX) unset (NCCL picks per device),
        C(pinned) sets one index valid on every twin, C(range) sets
        C(NCCL_IB_ADDR_RANGE); C(auto) takes the first that is right on every twin.
    type: str
    choices: [auto, nccl, pinned, range]
    default: auto
  check_gids:
    description: Work out the GID policy (needs the twins' addresses in place); fail if none fits.
    type: bool
    default: true
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.attributes.reads_sysfs]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Discover the fabric
  laguna.spark.rdma_netdev_info:
    address: 192.168.100.1
    hca_hint: rocep1s0f1
  register: fabric

- name: NCCL over both twins
  ansible.builtin.debug:
    msg: "{{ fabric.nccl_env }}"
"""

RETURN = r"""
devices:
  description: Every RDMA device seen, with the fields of RV(twins).
  returned: always
  type: list
  elements: dict
twins:
  description:
    - The cabled port's devices, lowest PCI domain first (name, port, pci, state, phys_state, rate, link_layer,
      netdev, netdev_present, operstate, mtu, pcie_speed, pcie_width, gids).
  returned: success
  type: list
  elements: dict
hcas:
  description: Names of the twins.
  returned: success
  type: list
  elements: str
  sample: [rocep1s0f1, roceP2p1s0f1]
netdevs:
  description: Netdevs of the twins, same order.
  returned: success
  type: list
  elements: str
  sample: [enp1s0f1np1, enP2p1s0f1np1]
addresses:
  description: Planned address/prefix of every twin, same order.
  returned: success
  type: list
  elements: str
  sample: [192.168.100.1/24, 192.168.101.1/24]
hardware:
  description: Whether every twin is a PCI device (false on a fake sysfs tree).
  returned: success
  type: bool
netplan:
  description: The netplan document for the twins.
  returned: success
  type: str
gid_policy:
  description: The policy chosen (nccl, pinned or range), or null when O(check_gids) is false.
  returned: success
  type: str
gid_checks:
  description:
    - Per twin, the address, the RoCE v2 GID index that maps it (wanted_index), and the index NCCL would pick
      (nccl_index, nccl_gid, nccl_gid_type, nccl_ok).
  returned: success
  type: list
  elements: dict
gid_indexes:
  description:
    - The RV(gid_checks)' C(wanted_index) of every twin, same order (the RoCE v2 GID index that maps its
      address; null for a twin without one); empty when O(check_gids) is false.
  returned: success
  type: list
  elements: int
  sample: [3, 3]
nccl_env:
  description: NCCL variables for the twins (NCCL_IB_HCA, and NCCL_IB_GID_INDEX or NCCL_IB_ADDR_RANGE as the policy needs).
  returned: success
  type: dict
  sample: {NCCL_IB_HCA: "=rocep1s0f1:1,roceP2p1s0f1:1"}
note:
  description: Remark, e.g. that O(hca_hint) is not on the cabled port.
  returned: when there is one
  type: str
"""

from ansible_collections.laguna.spark.plugins.module_utils import fabric
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        sysfs_infiniband=dict(type="path", default="/sys/class/infiniband"),
        sysfs_net=dict(type="path", default="/sys/class/net"),
        port=dict(type="int", default=1),
        hca_hint=dict(type="str"),
        address=dict(type="str", required=True),
        prefix=dict(type="int", default=24),
        twin_addresses=dict(type="list", elements="str", default=[]),
        mtu=dict(type="int", default=9000),
        renderer=dict(type="str"),
        gid_policy=dict(type="str", default="auto", choices=["auto", "nccl", "pinned", "range"]),
        check_gids=dict(type="bool", default=True),
    ))
    p = module.params
    if not 8 <= p["prefix"] <= 30:
        module.fail_json(msg="prefix must be between 8 and 30, not %d" % p["prefix"])
    if not 1280 <= p["mtu"] <= 9978:
        module.fail_json(msg="mtu must be between 1280 and 9978, not %d" % p["mtu"])
    devices = fabric.scan(p["sysfs_infiniband"], p["sysfs_net"], p["port"])
    try:
        twins, note = fabric.find_cabled_port(devices, p["hca_hint"])
    except ValueError as exc:
        module.fail_json(msg="%s (under %s)" % (exc, p["sysfs_infiniband"]), devices=devices)
    missing = [d["name"] for d in twins if not d["netdev"]]
    if missing:
        module.fail_json(msg="no netdev found for %s" % ", ".join(missing), devices=devices)
    try:
        addresses = fabric.plan_addresses(p["address"], p["prefix"], len(twins), p["twin_addresses"])
    except ValueError as exc:
        module.fail_json(msg="cannot plan the twins' addresses: %s" % exc, devices=devices)
    result = dict(
        changed=False, devices=devices, twins=twins,
        hcas=[d["name"] for d in twins], netdevs=[d["netdev"] for d in twins],
        addresses=addresses, hardware=all(d["pci"] for d in twins),
        netplan=fabric.render_netplan(twins, addresses, p["mtu"], p["renderer"]),
        gid_policy=None, gid_checks=[], gid_indexes=[], nccl_env={"NCCL_IB_HCA": fabric.nccl_ib_hca(twins)},
    )
    if note:
        result["note"] = note
    if p["check_gids"]:
        policy, env, checks = fabric.choose_gid_policy(p["sysfs_infiniband"], twins, addresses, p["gid_policy"])
        result.update(gid_policy=policy, gid_checks=checks, gid_indexes=[c["wanted_index"] for c in checks])
        if policy is None:
            module.fail_json(
                msg="No GID policy (%s) gives NCCL the RoCE v2 GID of each twin's address: %s"
                % (p["gid_policy"], "; ".join(
                    "%s wants %s (RoCE v2 GID index %s), NCCL would pick %s (%s, %s)" % (
                        c["device"], c["address"], c["wanted_index"], c["nccl_index"],
                        c["nccl_gid"], c["nccl_gid_type"]) for c in checks)),
                **result)
        result["nccl_env"].update(env)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
