#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: peers_reached
short_description: Stop a node's role in one sentence when a node whose facts it reads failed earlier in the run
version_added: "0.3.0"
description:
  - A role that reads another node's facts through C(hostvars) (the fabric,
    the SSH keys) runs this first. When a node of O(hosts) that is in the
    play has failed earlier in the run (or is unreachable), the task fails
    with one sentence naming that node, what O(role) needed of it, and the
    fix; when it is still in the play but lacks one of O(facts) (a C(--tags)
    or a condition skipped the roles that set them), the sentence says so.
  - Nodes outside the play (C(--limit)) are not checked, nor is the node
    running the task.
  - Runs on the controller only (an action plugin); it reads the play's
    C(ansible_play_hosts), C(ansible_play_hosts_all) and C(hostvars).
attributes:
  check_mode:
    support: full
    description: The same check in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.controller]
options:
  hosts:
    description: The nodes whose facts the role reads (inventory names).
    type: list
    elements: str
    required: true
  facts:
    description: The variables the role reads of each of O(hosts); each must be set.
    type: list
    elements: str
    default: []
  role:
    description: The role that reads them, for the message.
    type: str
    required: true
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Every node got as far as the fabric discovery (its fabric_facts), or network_gate stops here
  laguna.spark.peers_reached:
    hosts: "{{ laguna_cluster_hosts }}"
    facts: [fabric_facts]
    role: network_gate
"""

RETURN = r"""
msg:
  description: The sentence naming the node that failed first, or that every node got this far.
  returned: always
  type: str
  sample: >-
    laguna-worker failed earlier in this run (its error is above), so network_gate on laguna-head stops
    here (it needs laguna-worker's fabric_facts): fix what failed on laguna-worker and rerun.
"""
