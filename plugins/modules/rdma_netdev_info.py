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
  - The fabric role's probe M(laguna.spark.fabric_probe) makes the same
    discovery and compares the netplan file and the twins' netdevs too.
  - Read-only.
extends_documentation_fragment: [laguna.spark.fabric_discovery, laguna.spark.attributes.no_diff,
                                 laguna.spark.attributes.dgx_spark, laguna.spark.attributes.reads_sysfs]
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

from ansible_collections.laguna.spark.plugins.module_utils import fabric_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(fabric_probe.discovery_options())
    p = module.params
    try:
        result = fabric_probe.discover(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except fabric_probe.DiscoveryError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    if p["check_gids"]:
        failure = fabric_probe.gids(p["sysfs_infiniband"], result, p["gid_policy"])
        if failure:
            module.fail_json(msg=failure, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
