#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: network_gate_probe
short_description: Read in one call everything the network_gate role checks on a node
version_added: "0.4.0"
description:
  - "The network_gate role's probe. Reads, in this order, the SSH mesh over the RoCE addresses (with
    O(verify), C(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=N USER@ADDRESS true)
    as O(user) to each of O(verify_targets), the code of M(laguna.spark.ssh_mesh_peers)'s check), whether
    O(tool_path) is found as C(command -v) finds it, and O(record), the record of the last measurement
    that passed."
  - With O(head) and O(workers), plans the bandwidth tests as M(laguna.spark.ib_bw_check) plans them
    (RV(plan), the same keys) and, with O(record), compares what that measurement depended on (each
    test's devices, addresses and command lines, both sides' links as sysfs shows them, the thresholds)
    with what is planned now; RV(measure) says whether to measure (no record, a difference, or
    O(remeasure)).
  - Returns one line per difference (RV(differences)), so that the role acts on exactly what differs
    and check mode says what a run would do. A failed SSH check is a difference, and the role fails on it.
  - Read-only.
options:
  user:
    description: The service user; the SSH check runs as this user.
    type: str
    required: true
  tool_path:
    description:
      - The test's executable (the first word of the planned commands).
      - With O(find_tool), looked for as C(command -v) looks (the probe's C(PATH)); RV(tool_missing) when it
        is not found.
    type: str
    default: ib_write_bw
  find_tool:
    description: Look for O(tool_path) (false where no measurement can run, a fake fabric or no worker).
    type: bool
    default: true
  head:
    description:
      - The head's fabric facts (host, twins, addresses, gid_indexes), as M(laguna.spark.ib_bw_check) takes them.
      - Omitted (on a worker), nothing is planned.
    type: dict
  workers:
    description: The workers' fabric facts; with none, nothing is planned.
    type: list
    elements: dict
    default: []
  record:
    description:
      - The record of the last measurement that passed (JSON, C(inputs) as RV(record_inputs)), compared with
        the plan.
      - Omitted, nothing is compared and RV(measure) is false.
    type: path
  remeasure:
    description: Measure even when the record matches the plan.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Only reads (the SSH check included); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark,
                                 laguna.spark.bandwidth_plan, laguna.spark.ssh_mesh_check]
seealso:
  - module: laguna.spark.ib_bw_check
  - module: laguna.spark.ssh_mesh_peers
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the network gate
  laguna.spark.network_gate_probe:
    user: spark
    verify: true
    verify_targets: [{name: spark-2, address: 192.168.100.2}]
    tool_path: ib_write_bw
    head: "{{ head_fabric }}"
    workers: "{{ worker_fabrics }}"
    record: /home/spark/.local/state/laguna-spark/network_gate.json
  become: true
  become_user: spark
  register: probe
"""

RETURN = r"""
differences:
  description: What differs from what the role wants, one line each; empty when nothing does.
  returned: always
  type: list
  elements: str
  sample: ["/home/spark/.local/state/laguna-spark/network_gate.json: no measurement recorded; measure"]
checks:
  description: With O(verify), the SSH check of each target.
  returned: always
  type: list
  elements: dict
  contains:
    item:
      description: The target's inventory name.
      type: str
    address:
      description: The address connected to.
      type: str
    rc:
      description: The exit status of ssh (124 or 137 when it was stopped after twice the timeout plus one).
      type: int
    stderr:
      description: What ssh printed on stderr.
      type: str
tool_found:
  description: Where O(tool_path) was found; null when it was not, or not looked for (O(find_tool=false)).
  returned: always
  type: str
tool_missing:
  description: O(tool_path) was looked for and not found.
  returned: always
  type: bool
plan:
  description: The planned tests, as M(laguna.spark.ib_bw_check) returns them (pairs or argv, threshold_total);
    empty when nothing is planned.
  returned: always
  type: dict
record_inputs:
  description: What the measurement planned depends on, as the record keeps it (C(inputs)); empty when nothing
    is planned.
  returned: always
  type: dict
measure:
  description: Whether to measure (O(record) given and it differs from the plan, is missing, or O(remeasure)).
  returned: always
  type: bool
"""

import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import files, network_gate, perftest, ssh_mesh
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def ssh_differences(checks):
    """One line per failed SSH check."""
    found = []
    for check in checks:
        if check["rc"] != 0:
            lines = (check.get("stderr") or "").strip().splitlines()
            found.append("SSH to %s (%s): rc %s%s" % (check["item"], check["address"], check["rc"],
                                                      ", " + lines[-1] if lines else ""))
    return found


def main():
    module = new_module(dict(
        user=dict(type="str", required=True),
        verify=dict(type="bool", default=False),
        verify_targets=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            address=dict(type="str", required=True),
        )),
        connect_timeout=dict(type="int", default=5),
        tool=dict(type="str", default="ib_write_bw", choices=["ib_write_bw", "all_gather_perf"]),
        tool_path=dict(type="str", default="ib_write_bw"),
        find_tool=dict(type="bool", default=True),
        head=dict(type="dict"),
        workers=dict(type="list", elements="dict", default=[]),
        base_port=dict(type="int", default=18515),
        duration=dict(type="int", default=5),
        size=dict(type="int", default=1048576),
        qps=dict(type="int", default=4),
        nccl_env=dict(type="dict", default={}),
        min_gbps_per_device=dict(type="float", default=90.0),
        min_gbps_total=dict(type="float", default=0.0),
        record=dict(type="path"),
        remeasure=dict(type="bool", default=False),
    ))
    p = module.params
    if not 1 <= p["connect_timeout"] <= 600:
        module.fail_json(msg="connect_timeout must be between 1 and 600 seconds, not %d" % p["connect_timeout"])
    try:
        account = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="%s is not a user on this node: create it (the laguna role does) and rerun" % p["user"])
    differences = []
    result = dict(checks=[], tool_found=None, tool_missing=False, plan={}, record_inputs={}, measure=False)

    if p["verify"]:
        result["checks"] = ssh_mesh.run_checks(module, account, p["verify_targets"], p["connect_timeout"])
        differences += ssh_differences(result["checks"])

    if p["find_tool"]:
        result["tool_found"] = network_gate.find_tool(p["tool_path"], os.environ.get("PATH", ""))
        result["tool_missing"] = result["tool_found"] is None
        if result["tool_missing"]:
            differences.append("%s: not found (command -v)" % p["tool_path"])

    if p["head"] is not None and p["workers"]:
        try:
            result["plan"] = perftest.plan(p["tool"], p["head"], p["workers"], p["tool_path"],
                                           p["base_port"], p["duration"], p["size"], p["qps"], p["nccl_env"],
                                           p["min_gbps_per_device"], p["min_gbps_total"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            module.fail_json(msg="cannot plan the bandwidth tests: %s" % exc, **result)
        result["record_inputs"] = network_gate.record_inputs(p["tool"], result["plan"], p["min_gbps_per_device"])
        if p["record"]:
            text = files.read_text(p["record"], default=None, undecodable=files.DEFAULT)
            if text is None and os.path.lexists(p["record"]):
                text = ""  # there but unreadable: measure again
            stale = network_gate.record_differences(p["record"], text, result["record_inputs"])
            if not stale and p["remeasure"]:
                stale = ["%s: the last measurement stands, measured again (remeasure)" % p["record"]]
            differences += stale
            result["measure"] = bool(stale)

    module.exit_json(changed=False, differences=differences, **result)


if __name__ == "__main__":
    main()
