#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_info
short_description: Read in one call everything the preflight role checks on a node
version_added: "0.2.0"
description:
  - The preflight role's probe. Reads the NVIDIA driver version
    (C(nvidia-smi --query-gpu=driver_version --format=csv,noheader)), the
    executables in a venv, the bytes already staged in the checkpoint trees
    and the space free where they go (what C(df -P -B1) reports as
    available), the RoCE link (the netdev's operstate and IPv4 addresses, the
    RDMA port's state), SSH from this node to others (C(ssh OPTIONS
    USER@ADDRESS true) as O(ssh_user)), the page cache of the model trees,
    and the processes matching O(stray_pattern) that O(stray_unit) does not
    own.
  - Returns each check's verdict with its message (the role asserts on
    them) and RV(differences), one line per thing a run would change on the
    node (a stray process to stop, cached pages to drop).
  - Changes nothing; the SSH check connects and runs C(true) remotely.
attributes:
  check_mode:
    support: full
    description: Only reads (and connects, for the SSH check); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
options:
  node:
    description: The node's name in messages (its inventory name).
    type: str
    required: true
  nvidia_smi:
    description: The nvidia-smi that reads the driver version (a name on C(PATH) or a path).
    type: str
    default: nvidia-smi
  min_driver_version:
    description: The oldest driver accepted.
    type: str
    default: "580"
  venv:
    description: The venv whose C(bin) must hold O(executables). Unset, the venv is not checked.
    type: path
  executables:
    description: Executables required in O(venv)C(/bin).
    type: list
    elements: str
    default: []
  model_path:
    description: The target checkpoint's tree; free space is measured for its parent directory.
    type: path
    required: true
  draft_path:
    description: The draft checkpoint's tree; what is staged in either tree counts as room.
    type: path
    required: true
  min_free_gb:
    description: GB (10^9 bytes) both checkpoints need, less what is already staged.
    type: int
    required: true
  roce:
    description: The RoCE link to check. Unset, it is not checked.
    type: dict
    suboptions:
      ifname:
        description: The RoCE netdev.
        type: str
        required: true
      address:
        description: The IPv4 address it must carry.
        type: str
        required: true
      hca:
        description: The RDMA device.
        type: str
        required: true
      port:
        description: Its port.
        type: int
        default: 1
      sysfs_net:
        description: Where netdevs appear in sysfs.
        type: path
        default: /sys/class/net
      sysfs_infiniband:
        description: Where RDMA devices appear in sysfs.
        type: path
        default: /sys/class/infiniband
  ssh_targets:
    description: Nodes to reach over SSH, each inventory name (for messages) to the address connected to, in order.
    type: dict
    default: {}
  ssh_user:
    description:
      - Who connects (and the remote user). When the module runs as another
        user (root), ssh runs under C(runuser -u SSH_USER --). Required with O(ssh_targets).
    type: str
  ssh_options:
    description: ssh's options.
    type: list
    elements: str
    default: []
  page_cache_paths:
    description: Trees whose cached pages are measured (M(laguna.spark.page_cache) with V(state=present)). Unset, not measured.
    type: list
    elements: path
  stray_pattern:
    description: Regular expression of the command lines of processes that O(stray_unit) must own. Unset, none are looked for.
    type: str
  stray_unit:
    description: The systemd unit whose processes matching O(stray_pattern) are not strays.
    type: str
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read what preflight checks
  laguna.spark.preflight_info:
    node: "{{ inventory_hostname }}"
    model_path: /home/spark/models/hf/Laguna-S-2.1-FP8
    draft_path: /home/spark/models/hf/Laguna-S-2.1-DFlash-W4A16
    min_free_gb: 122
    page_cache_paths:
      - /home/spark/models/hf/Laguna-S-2.1-FP8
      - /home/spark/models/hf/Laguna-S-2.1-DFlash-W4A16
    stray_pattern: "[v]llm serve"
    stray_unit: laguna-vllm.service
  become: true
  register: probe

- name: The NVIDIA driver is recent enough
  ansible.builtin.assert:
    that: probe.driver.ok
    fail_msg: "{{ probe.driver.msg }}"
"""

RETURN = r"""
driver:
  description: V(ok), V(msg) (the version, or why it is too old or unreadable) and V(version) (the first line nvidia-smi printed).
  returned: always
  type: dict
  sample: {"ok": true, "msg": "driver 580.95.05", "version": "580.95.05"}
missing_executables:
  description: Of O(executables), those not in O(venv)C(/bin) (empty when O(venv) is unset).
  returned: always
  type: list
  elements: str
space:
  description: V(ok), V(msg), V(needed), V(free) (bytes), V(staged) (bytes) and V(where) (the directory measured).
  returned: always
  type: dict
roce:
  description: V(ok) and V(msg) of the RoCE link; empty when O(roce) is unset.
  returned: always
  type: dict
ssh:
  description: Per target of O(ssh_targets), V(name), V(address), V(rc) and V(stderr) of the ssh run.
  returned: always
  type: list
  elements: dict
page_cache:
  description: The trees' survey (V(trees), V(cached_bytes), V(msg)); empty when O(page_cache_paths) is unset.
  returned: always
  type: dict
strays:
  description: The processes matching O(stray_pattern) that O(stray_unit) does not own (V(pid), V(cmdline), V(unit), V(uid)).
  returned: always
  type: list
  elements: dict
differences:
  description: One line per thing a run would change on the node (a stray process, cached pages to drop).
  returned: always
  type: list
  elements: str
"""

import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import page_cache, preflight, procs
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def _run(module, argv):
    """(rc, stdout, stderr) of argv; a command that cannot be started gives rc 2 and the error."""
    try:
        rc, out, err = module.run_command(argv, handle_exceptions=False)
    except OSError as exc:
        return 2, "", str(exc)
    return rc, out.rstrip("\r\n"), err.rstrip("\r\n")


def _ssh(module, p):
    if not p["ssh_targets"]:
        return []
    if not p["ssh_user"]:
        module.fail_json(msg="preflight_info: ssh_user is required with ssh_targets")
    current = pwd.getpwuid(os.geteuid()).pw_name
    prefix = []
    if current != p["ssh_user"]:
        runuser = module.get_bin_path("runuser", opt_dirs=["/usr/sbin", "/sbin"])
        if not runuser:
            module.fail_json(msg="preflight_info: runuser (util-linux) not found on %s, needed to run ssh as %s; "
                                 "install util-linux" % (p["node"], p["ssh_user"]))
        prefix = preflight.run_as(p["ssh_user"], current, runuser)
    results = []
    for name, address in p["ssh_targets"].items():
        rc, _out, err = _run(module, prefix + preflight.ssh_argv("ssh", p["ssh_options"], p["ssh_user"], str(address)))
        results.append({"name": name, "address": str(address), "rc": rc, "stderr": err})
    return results


def main():
    module = new_module(dict(
        node=dict(type="str", required=True),
        nvidia_smi=dict(type="str", default="nvidia-smi"),
        min_driver_version=dict(type="str", default="580"),
        venv=dict(type="path"),
        executables=dict(type="list", elements="str", default=[]),
        model_path=dict(type="path", required=True),
        draft_path=dict(type="path", required=True),
        min_free_gb=dict(type="int", required=True),
        roce=dict(type="dict", options=dict(
            ifname=dict(type="str", required=True),
            address=dict(type="str", required=True),
            hca=dict(type="str", required=True),
            port=dict(type="int", default=1),
            sysfs_net=dict(type="path", default="/sys/class/net"),
            sysfs_infiniband=dict(type="path", default="/sys/class/infiniband"),
        )),
        ssh_targets=dict(type="dict", default={}),
        ssh_user=dict(type="str"),
        ssh_options=dict(type="list", elements="str", default=[]),
        page_cache_paths=dict(type="list", elements="path"),
        stray_pattern=dict(type="str"),
        stray_unit=dict(type="str"),
    ))
    p = module.params
    node = p["node"]

    rc, out, err = _run(module, [p["nvidia_smi"], "--query-gpu=driver_version", "--format=csv,noheader"])
    lines = out.splitlines()
    driver = preflight.driver(rc, lines, err, p["min_driver_version"], node)
    driver["version"] = lines[0].strip() if rc == 0 and lines else ""

    missing = preflight.missing_executables(p["venv"], p["executables"]) if p["venv"] else []

    try:
        where, free = preflight.free_bytes(p["model_path"])
    except OSError as exc:
        module.fail_json(msg="%s: cannot measure the free space for %s: %s" % (node, p["model_path"], exc))
    staged = preflight.staged_bytes([p["model_path"], p["draft_path"]])
    space = preflight.space(free, staged, p["min_free_gb"], os.path.dirname(p["model_path"]), node)
    space.update(free=free, staged=staged, where=where)

    roce = {}
    if p["roce"]:
        r = p["roce"]
        operstate, port_state = preflight.roce_state(r["sysfs_net"], r["ifname"], r["sysfs_infiniband"], r["hca"], r["port"])
        _rc, addresses, _err = _run(module, ["ip", "-4", "-o", "addr", "show", "dev", r["ifname"]])
        roce = preflight.roce(operstate, addresses, port_state, r["ifname"], r["address"], r["hca"], r["port"], node)

    ssh = _ssh(module, p)

    cache = {}
    if p["page_cache_paths"] is not None:
        trees = page_cache.survey(p["page_cache_paths"])
        cached = sum(t["cached"] for t in trees.values())
        cache = {"trees": trees, "cached_bytes": cached,
                 "msg": "%.2f GB of page cache over %d tree(s)" % (cached / 1e9, len(p["page_cache_paths"]))}

    strays = []
    if p["stray_pattern"]:
        found = procs.matching(p["stray_pattern"], exclude=(os.getpid(), os.getppid()))
        strays = procs.strays(found, p["stray_unit"])

    module.exit_json(changed=False, driver=driver, missing_executables=missing, space=space, roce=roce, ssh=ssh,
                     page_cache=cache, strays=strays,
                     differences=preflight.differences(node, strays, p["stray_unit"] or "any unit", cache or None))


if __name__ == "__main__":
    main()
