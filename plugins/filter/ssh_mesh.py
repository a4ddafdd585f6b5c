# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""ssh_mesh_targets and ssh_mesh_recheck: the ssh_mesh role's mesh check, from the peers' hostvars."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import ssh_mesh
from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars


def ssh_mesh_targets(peers, hostvars, address_var="laguna_roce_ip"):
    """[{name, address}] of the peers, each at its address."""
    try:
        return ssh_mesh.targets(host_vars(peers, hostvars, AnsibleFilterError, "ssh_mesh_targets", "the peers"),
                                address_var)
    except ValueError as exc:
        raise AnsibleFilterError("ssh_mesh_targets: %s" % exc)


def ssh_mesh_recheck(checks, peers, hostvars, result_var="ssh_mesh_apply"):
    """Whether a failed check went to a peer whose ~/.ssh changed in this run (its ``result_var``
    says changed)."""
    changed = []
    for peer, facts in host_vars(peers, hostvars, AnsibleFilterError, "ssh_mesh_recheck", "the peers"):
        result = facts[result_var] if result_var in facts else None
        if isinstance(result, dict) and result.get("changed"):
            changed.append(peer)
    return ssh_mesh.recheck(checks, changed)


class FilterModule(object):
    def filters(self):
        return {"ssh_mesh_targets": ssh_mesh_targets, "ssh_mesh_recheck": ssh_mesh_recheck}
