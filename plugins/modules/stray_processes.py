#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stray_processes
short_description: Find, and stop, processes matching a pattern that a given systemd unit does not own
version_added: "0.2.0"
description:
  - Scans C(/proc) for processes whose command line matches O(pattern) (a
    Python regular expression, so the recipe's C([v]llm serve) works as is)
    and keeps those outside the cgroup of O(unit). A C(vllm serve) started by
    hand beside the managed service holds GPU memory and a port, and is never
    ignored.
  - With O(state=absent) they get SIGTERM, and SIGKILL after O(timeout)
    seconds. With O(state=present) they are only reported, and the module
    fails if there are any (O(fail_msg) says what to do).
attributes:
  check_mode:
    support: full
    description: Reports what would be stopped.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
options:
  pattern:
    description: Regular expression searched in each process's command line.
    type: str
    required: true
  unit:
    description:
      - The unit whose processes are not strays (for example C(laguna-vllm.service)).
      - Omitted, every matching process is a stray (for example a C(pip install)
        that an interrupted run left behind).
    type: str
  state:
    description: C(absent) stops the strays; C(present) reports them and fails if there are any.
    type: str
    choices: [absent, present]
    default: absent
  timeout:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 30
  fail_msg:
    description: Message when O(state=present) finds strays.
    type: str
    default: processes outside the managed unit
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Stop a pip install that an interrupted run left behind
  laguna.spark.stray_processes:
    pattern: "^/home/spark/venvs/vllm-025/bin/python -m pip install"
    timeout: 10
  become: true

- name: Stop vllm serve processes the managed unit does not own
  laguna.spark.stray_processes:
    pattern: "[v]llm serve"
    unit: laguna-vllm.service
  become: true
"""

RETURN = r"""
strays:
  description: The processes outside O(unit) that matched (before stopping them).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "cmdline": "python vllm serve /models/x", "unit": "session-3.scope", "uid": 1000}]
killed:
  description: PIDs that did not end on SIGTERM within O(timeout) and were killed.
  returned: always
  type: list
  elements: int
managed:
  description: How many matching processes the unit owns.
  returned: always
  type: int
  sample: 1
"""

import os

from ansible_collections.laguna.spark.plugins.module_utils import procs
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        pattern=dict(type="str", required=True),
        unit=dict(type="str"),
        state=dict(type="str", choices=["absent", "present"], default="absent"),
        timeout=dict(type="int", default=30),
        fail_msg=dict(type="str", default="processes outside the managed unit"),
    ))
    p = module.params
    found = procs.matching(p["pattern"], exclude=(os.getpid(), os.getppid()))
    strays = procs.strays(found, p["unit"])
    result = dict(changed=False, strays=strays, killed=[], managed=len(found) - len(strays))
    if not strays:
        module.exit_json(**result)
    if p["state"] == "present":
        module.fail_json(msg="%s: %s" % (p["fail_msg"], "; ".join(
            "pid %d (%s): %s" % (s["pid"], s["unit"] or "no unit", s["cmdline"][:160]) for s in strays)), **result)
    result["changed"] = True
    if not module.check_mode:
        result["killed"] = procs.terminate([s["pid"] for s in strays], p["timeout"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
