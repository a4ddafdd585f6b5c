# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""known_host_pairs: the (name, key) pairs the ssh_mesh role pins, from the peers' hostvars."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import known_hosts
from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars


def known_host_pairs(peers, hostvars, extra_address_vars=None, address_var="laguna_roce_ip",
                     keys_var="ssh_mesh_hostkeys"):
    """[{host, name, key}] for every peer, every name it is known by and every host key it has."""
    found = []
    for peer, facts in host_vars(peers, hostvars, AnsibleFilterError, "known_host_pairs", "the peers"):
        names = []
        for var in [address_var] + list(extra_address_vars or []):
            if var not in facts or facts[var] in (None, ""):
                raise AnsibleFilterError("known_host_pairs: %s has no %s" % (peer, var))
            names.append(facts[var])
        keys = facts[keys_var] if keys_var in facts else []
        found.extend(known_hosts.peer_pairs(peer, names, keys))
    return found


class FilterModule(object):
    def filters(self):
        return {"known_host_pairs": known_host_pairs}
