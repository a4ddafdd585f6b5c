# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that discover the cabled CX7 port's twins (rdma_netdev_info, and the fabric role's probe fabric_probe)."""

    DOCUMENTATION = r"""
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
"""
