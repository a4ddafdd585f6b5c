#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_check
short_description: Check SSH from this node to others, and explain SSH and sudo failures by their cause
version_added: "0.1.0"
description:
  - With O(targets), runs C(ssh -o BatchMode=yes -o ConnectTimeout=N USER@ADDRESS true)
    to each target as the user the task runs as (the service user, with
    C(become_user)), bounded by O(timeout) seconds, and classifies each
    failure by what ssh printed. A changed host key, an unknown host key, a
    host that is down, a closed SSH port, a name that does not resolve, and
    refused keys each get their own fix.
  - With O(failure_message), runs nothing and classifies a failure message that
    Ansible reported, O(kind=connection) (the controller could not reach a
    node) or O(kind=become) (sudo refused), and fails with the cause and its fix.
  - Read-only; supports check mode.
attributes:
  check_mode:
    support: full
    description: Only connects and runs C(true) remotely; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
options:
  targets:
    description: Nodes to reach. Mutually exclusive with O(failure_message).
    type: list
    elements: dict
    suboptions:
      name:
        description: Inventory name, for messages.
        type: str
        required: true
      address:
        description: Address to connect to (the node's RoCE address).
        type: str
        required: true
  user:
    description: Remote user of the SSH connection (and the user to become, with O(kind=become)).
    type: str
    required: true
  options:
    description: Further ssh options, such as C(-o StrictHostKeyChecking=accept-new).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds to wait for each connection (C(ConnectTimeout)); the whole
        command is stopped after twice that plus one.
    type: int
    default: 10
  ssh:
    description: The ssh client.
    type: str
    default: ssh
  failure_message:
    description: A failure message to classify instead of connecting. Mutually exclusive with O(targets).
    type: str
  kind:
    description: What O(failure_message) is about.
    type: str
    choices: [connection, become]
    default: connection
  source:
    description: Who connects or becomes, for messages (the head, the controller, a user).
    type: str
    default: this node
  address:
    description: Address the failed connection of O(failure_message) went to.
    type: str
  target:
    description: Inventory name of the node O(failure_message) is about.
    type: str
  fail:
    description: Fail when a target cannot be reached (or when O(failure_message) is a failure).
    type: bool
    default: true
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The head reaches spark-2 over the RoCE link as spark
  laguna.spark.ssh_check:
    targets:
      - name: spark-2
        address: 192.168.100.2
    user: spark
    options: [-o, StrictHostKeyChecking=accept-new]
    timeout: 5
  become: true
  become_user: spark

- name: Explain a become failure caught in a rescue
  laguna.spark.ssh_check:
    failure_message: "{{ ansible_failed_result.msg }}"
    kind: become
    user: spark
    source: ubuntu
    target: "{{ inventory_hostname }}"
"""

RETURN = r"""
results:
  description: One entry per target (or one for O(failure_message)).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The target.
      type: str
    address:
      description: The address connected to.
      type: str
    rc:
      description: Exit status of ssh (255 for a connection failure, 124 when O(timeout) ran out).
      type: int
    cause:
      description:
        - C(ok), C(host_key_changed), C(host_key_unknown), C(dns), C(refused),
          C(host_down), C(auth), C(config), C(closed) or C(unknown); for
          O(kind=become) C(not_in_sudoers), C(not_allowed), C(unknown_user),
          C(password_incorrect), C(password_missing), C(timeout), C(tmp_permissions) or C(unknown).
      type: str
    summary:
      description: The cause in words.
      type: str
    fix:
      description: What to do about it (null when it worked).
      type: str
    message:
      description: Full sentence with the cause, the fix and the last line ssh or sudo printed.
      type: str
    stderr:
      description: What ssh printed.
      type: str
    waited:
      description: Seconds the connection took.
      type: float
failed_targets:
  description: Names of the targets that could not be reached.
  returned: always
  type: list
  elements: str
"""

import time

from ansible_collections.laguna.spark.plugins.module_utils import connection_diag as cd
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def probe(module, target):
    p = module.params
    ssh = module.get_bin_path(p["ssh"], required=True) if "/" not in p["ssh"] else p["ssh"]
    argv = cd.ssh_argv(ssh, p["user"], target["address"], p["options"], p["timeout"])
    limit = 2 * p["timeout"] + 1
    limiter = module.get_bin_path("timeout")
    if limiter:  # ConnectTimeout does not bound a server that accepts and then stalls
        argv = [limiter, "--kill-after=2", str(limit)] + argv
    started = time.time()
    rc, out, err = module.run_command(argv)
    waited = round(time.time() - started, 1)
    if rc in (124, 137):
        err = (err or "") + "\nssh timed out after %d s" % limit
    result = cd.explain_ssh(err, rc, p["user"], target["address"], p["source"], target["name"], waited)
    result.update(name=target["name"], address=target["address"], rc=rc, stderr=err, waited=waited)
    return result


def main():
    module = new_module(dict(
        targets=dict(type="list", elements="dict", options=dict(
            name=dict(type="str", required=True),
            address=dict(type="str", required=True))),
        user=dict(type="str", required=True),
        options=dict(type="list", elements="str", default=[]),
        timeout=dict(type="int", default=10),
        ssh=dict(type="str", default="ssh"),
        failure_message=dict(type="str"),
        kind=dict(type="str", choices=["connection", "become"], default="connection"),
        source=dict(type="str", default="this node"),
        address=dict(type="str"),
        target=dict(type="str"),
        fail=dict(type="bool", default=True),
    ), mutually_exclusive=[("targets", "failure_message")], required_one_of=[("targets", "failure_message")])
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, not %d" % p["timeout"])

    if p["failure_message"] is not None:
        target = p["target"] or "this node"
        if p["kind"] == "become":
            result = cd.explain_become(p["failure_message"], p["user"], p["source"], target)
        else:
            result = cd.explain_ssh(p["failure_message"], 255, p["user"], p["address"] or target, p["source"], target)
        result.update(name=target, address=p["address"], rc=None, stderr=p["failure_message"], waited=None)
        results, failed = [result], [target]
    else:
        results = [probe(module, target) for target in p["targets"]]
        failed = [r["name"] for r in results if r["cause"] != "ok"]

    if failed and p["fail"]:
        module.fail_json(msg=" ".join(r["message"] for r in results if r["cause"] != "ok"),
                         results=results, failed_targets=failed)
    module.exit_json(changed=False, results=results, failed_targets=failed)


if __name__ == "__main__":
    main()
