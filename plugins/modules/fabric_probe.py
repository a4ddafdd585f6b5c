#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_probe
short_description: Read in one call everything the fabric role checks on a node
version_added: "0.2.0"
description:
  - The fabric role's probe. Makes the discovery of M(laguna.spark.rdma_netdev_info)
    (the cabled port's twins, their netdevs and GIDs, the planned addresses, the
    netplan document, the GID policy; the same keys), and, with O(netplan_file),
    reads that file and every twin's netdev (its MTU and C(flags) in sysfs, its
    IPv4 addresses from C(ip -4 -o addr show)) and compares them with the
    document - the file's sha256 with the document's, each twin's MTU with
    O(mtu), its administrative state with up, its addresses with its planned one.
  - Returns one line per difference (RV(differences)) and what the role does
    about them (RV(netplan_write), RV(netplan_apply)), so that the role acts on
    exactly what differs and check mode says what a run would change. On a fake
    sysfs tree (no PCI device behind the twins) the role leaves netplan alone,
    and nothing here is a difference.
  - The GID policy needs the twins' addresses in place; when none fits while
    the netplan is about to be applied, the module says so (RV(gids_deferred))
    instead of failing.
  - Read-only.
options:
  netplan_file:
    description:
      - The netplan file the role writes; compared with RV(netplan), and the twins' netdevs with it.
      - Omitted, the module only discovers, as M(laguna.spark.rdma_netdev_info).
    type: path
  resolve_gid_type:
    description:
      - Also resolve this node's GID index of that type for O(address) on the
        first twin, as M(laguna.spark.roce_gid) does (RV(roce_gid)), in the
        same call; no GID mapping the address fails with roce_gid's sentence.
      - The role C(laguna.spark.fabric_env) sets it, so that discovering the
        fabric and resolving the index cost one call to the node.
    type: str
attributes:
  check_mode:
    support: full
    description: Only reads (sysfs, O(netplan_file), C(ip -4 -o addr show)); the same result in check mode.
extends_documentation_fragment: [laguna.spark.fabric_discovery, laguna.spark.attributes.no_diff,
                                 laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the fabric
  laguna.spark.fabric_probe:
    address: 192.168.100.1
    hca_hint: rocep1s0f1
    netplan_file: /etc/netplan/60-laguna-fabric.yaml
  become: true
  register: fabric_info

- name: What differs from the wanted fabric
  ansible.builtin.debug:
    msg: "{{ fabric_info.differences }}"
  when: fabric_info.differences | length > 0
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
  description:
    - The policy chosen (nccl, pinned or range), or null when O(check_gids) is false or when the check waits
      for the netplan to be applied (RV(gids_deferred)).
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
gids_deferred:
  description:
    - No GID policy fits yet, but RV(netplan_apply) is true (the twins' addresses are about to change), so the
      module did not fail; the role probes again after C(netplan apply) and fails then. False otherwise.
  returned: success
  type: bool
roce_gid:
  description:
    - With O(resolve_gid_type), the M(laguna.spark.roce_gid) result for the first twin - gid_index, gid,
      ndev, gids, start_env_script.
  returned: when O(resolve_gid_type) is set
  type: dict
links:
  description:
    - With O(netplan_file), each twin's netdev as read, same order as RV(netdevs) - netdev, present, mtu,
      operstate, admin_up (the IFF_UP flag; null when unreadable), addresses (its IPv4 a.b.c.d/prefix, from
      C(ip -4 -o addr show)), summary (those in a few words), differences (its lines of RV(differences)). Empty
      without O(netplan_file).
  returned: success
  type: list
  elements: dict
  sample: [{netdev: enp1s0f1np1, present: true, mtu: 9000, operstate: up, admin_up: true,
            addresses: [192.168.100.1/24], summary: "enp1s0f1np1: MTU 9000, up, inet 192.168.100.1/24",
            differences: []}]
netplan_managed:
  description: Whether the netplan file and the links are compared - O(netplan_file) given and RV(hardware) true.
  returned: success
  type: bool
netplan_exists:
  description: Whether O(netplan_file) exists (readable).
  returned: success
  type: bool
netplan_checksum:
  description: sha256 of O(netplan_file), null when missing.
  returned: success
  type: str
netplan_wanted_checksum:
  description: sha256 of RV(netplan).
  returned: success
  type: str
netplan_current:
  description: The text of O(netplan_file) when RV(netplan_apply) is true and it exists (the role's rollback copy); null otherwise.
  returned: success
  type: str
netplan_write:
  description: O(netplan_file) is not RV(netplan) (the role validates it with C(netplan generate) and writes it).
  returned: success
  type: bool
netplan_apply:
  description: RV(netplan_write), or a twin's netdev differs from what the document sets (the role runs C(netplan apply)).
  returned: success
  type: bool
differences:
  description: One line per difference from what the fabric role wants (the netplan file, each twin's MTU, state and address).
  returned: success
  type: list
  elements: str
  sample: ["enP2p1s0f1np1: MTU 1500, wanted 9000"]
"""

from ansible_collections.laguna.spark.plugins.module_utils import fabric_probe, roce
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    options = fabric_probe.discovery_options()
    options.update(netplan_file=dict(type="path"), resolve_gid_type=dict(type="str"))
    module = new_module(options)
    p = module.params
    try:
        result = fabric_probe.discover(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except fabric_probe.DiscoveryError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    result.update(links=[], netplan_managed=False, netplan_exists=False, netplan_checksum=None,
                  netplan_wanted_checksum=None, netplan_current=None, netplan_write=False, netplan_apply=False,
                  differences=[], gids_deferred=False)
    if p["netplan_file"]:
        ip_text = ""
        ip = module.get_bin_path("ip")
        if ip:
            _rc, ip_text, _err = module.run_command([ip, "-4", "-o", "addr", "show"])
        fabric_probe.compare(result, p["sysfs_net"], p["netplan_file"], ip_text, p["mtu"])
    if p["check_gids"]:
        failure = fabric_probe.gids(p["sysfs_infiniband"], result, p["gid_policy"])
        if failure and result["netplan_apply"]:
            result["gids_deferred"] = True
        elif failure:
            module.fail_json(msg=failure, **result)
    if p["resolve_gid_type"]:
        if not result["hcas"]:
            module.fail_json(msg="No RDMA device of the cabled port to resolve a %s GID of %s on (devices seen: %s)"
                             % (p["resolve_gid_type"], p["address"],
                                ", ".join(d["name"] for d in result["devices"]) or "none"), **result)
        found, failure = roce.resolve(p["sysfs_infiniband"], result["hcas"][0], p["port"], p["address"],
                                      p["resolve_gid_type"])
        if failure:
            module.fail_json(msg=failure, **result)
        result["roce_gid"] = found
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
