# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that run the SSH mesh check (ssh_mesh_peers, and the network_gate role's probe
    network_gate_probe; the code is module_utils.ssh_mesh.run_checks)."""

    DOCUMENTATION = r"""
options:
  verify:
    description: Check that this node reaches every one of O(verify_targets) without a prompt.
    type: bool
    default: false
  verify_targets:
    description: The nodes the check connects to.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Inventory name, for messages.
        type: str
        required: true
      address:
        description: The address ssh connects to (the node's RoCE address).
        type: str
        required: true
  connect_timeout:
    description: C(ConnectTimeout) of the check, seconds; each ssh is stopped after twice that plus one.
    type: int
    default: 5
"""
