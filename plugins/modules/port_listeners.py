#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_listeners
short_description: Which processes listen on a TCP port, and which systemd unit owns them
version_added: "0.2.0"
description:
  - Reads C(/proc/net/tcp), C(/proc/net/tcp6) and each process's open file
    descriptors (run it as root to see every user's processes; a listener
    whose process this user cannot read is still listed, by its owner's uid,
    with no pid, and counts as foreign).
  - With O(allowed_unit), fails when anything else listens on the port, with
    the process named, so a port held by another program is found before
    vLLM fails to bind it after minutes of loading.
  - Read-only.
attributes:
  check_mode:
    support: full
    description: Only reads C(/proc); the same result in check mode.
  platform:
    support: full
    platforms: linux
    description: Linux (DGX Spark, Ubuntu 24.04).
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
options:
  port:
    description: TCP port.
    type: int
    required: true
  allowed_unit:
    description: The unit that may listen there (for example C(laguna-vllm.service)); others make the module fail.
    type: str
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Nothing but vLLM holds the API port
  laguna.spark.port_listeners:
    port: 8000
    allowed_unit: laguna-vllm.service
  become: true
"""

RETURN = r"""
listeners:
  description:
    - Processes listening on TCP port O(port), IPv4 or IPv6, with their owner's C(uid).
    - A listening socket whose process this user cannot read has C(pid) null, C(hidden) true and C(uid) its owner's.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 812, "cmdline": "python3 -m http.server 8000", "unit": "session-4.scope", "address": "00000000",
            "uid": 0}]
foreign:
  description: The listeners that O(allowed_unit) does not own.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.laguna.spark.plugins.module_utils import procs
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(port=dict(type="int", required=True), allowed_unit=dict(type="str")))
    port, unit = module.params["port"], module.params["allowed_unit"]
    if not 0 < port < 65536:
        module.fail_json(msg="port must be 1-65535, not %d" % port)
    read = procs.port_holders(port, unit)
    if read["foreign"]:
        module.fail_json(msg=read["message"], listeners=read["listeners"], foreign=read["foreign"])
    module.exit_json(changed=False, listeners=read["listeners"], foreign=read["foreign"])


if __name__ == "__main__":
    main()
