#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_gid
short_description: Resolve the RoCE v2 GID index of a node's IPv4 address from sysfs
version_added: "0.1.0"
description:
  - Reads C(<sysfs_root>/<hca>/ports/<port>/gids/*) and
    C(gid_attrs/types/*) and returns the index of the GID whose value is the
    IPv4-mapped form (C(::ffff:a.b.c.d)) of O(address) and whose type is
    O(gid_type).
  - The index differs per node and moves when addresses are re-added, so it is
    resolved each time the fabric environment (C(NCCL_IB_GID_INDEX)) is built.
  - Read-only; supports check mode.
options:
  hca:
    description: RDMA device name, as under C(/sys/class/infiniband).
    type: str
    required: true
  port:
    description: Port number of the HCA.
    type: int
    default: 1
  address:
    description: The node's IPv4 address on the RoCE link.
    type: str
    required: true
  gid_type:
    description: GID type to match, as the kernel spells it in C(gid_attrs/types).
    type: str
    default: RoCE v2
  sysfs_root:
    description: Directory holding the RDMA devices; a fake tree in tests.
    type: path
    default: /sys/class/infiniband
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.attributes.reads_sysfs]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Resolve the RoCE v2 GID index for NCCL
  laguna.spark.roce_gid:
    hca: rocep1s0f1
    port: 1
    address: 192.168.100.10
  register: gid

- name: Use it
  ansible.builtin.debug:
    msg: "NCCL_IB_GID_INDEX={{ gid.gid_index }}"
"""

RETURN = r"""
gid_index:
  description: Index of the matching GID.
  returned: success
  type: int
  sample: 3
gid:
  description: The matching GID.
  returned: success
  type: str
  sample: "0000:0000:0000:0000:0000:ffff:c0a8:640a"
ndev:
  description: Network device the GID belongs to, when sysfs says.
  returned: success
  type: str
  sample: enp1s0f1np1
start_env_script:
  description:
    - A POSIX sh script that makes the same choice when it runs (the lowest
      index of O(gid_type) whose GID maps O(address)) and writes
      C(NCCL_IB_GID_INDEX=<index>) to the file named by its first argument;
      it exits 1 when no GID maps the address.
    - For M(laguna.spark.systemd_run_service)'s O(laguna.spark.systemd_run_service#module:start_env_script),
      so that a persistent unit resolves the index anew at each start.
  returned: success
  type: str
gids:
  description: Every populated GID of O(hca) port O(port), with its index, type, netdev and IPv4 address.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.laguna.spark.plugins.module_utils import roce
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        hca=dict(type="str", required=True),
        port=dict(type="int", default=1),
        address=dict(type="str", required=True),
        gid_type=dict(type="str", default=roce.ROCE_V2),
        sysfs_root=dict(type="path", default="/sys/class/infiniband"),
    ))
    params = module.params
    found, failure = roce.resolve(params["sysfs_root"], params["hca"], params["port"], params["address"],
                                  params["gid_type"])
    if failure:
        module.fail_json(msg=failure, **found)
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
