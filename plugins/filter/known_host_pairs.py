# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""known_host_pairs: the (name, key) pairs the ssh_mesh role pins, from the peers' hostvars."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import known_hosts


def known_host_pairs(peers, hostvars, extra_address_vars=None, address_var="laguna_roce_ip",
                     keys_var="ssh_mesh_hostkeys"):
    """[{host, name, key}] for every peer, every name it is known by and every host key it has."""
    if isinstance(peers, (str, bytes)) or not hasattr(peers, "__iter__"):
        raise AnsibleFilterError("known_host_pairs: the peers must be a list of inventory host names")
    found = []
    for peer in peers:
        try:
            facts = hostvars[peer]
        except KeyError:
            raise AnsibleFilterError("known_host_pairs: %s is not in the inventory" % peer)
        if not isinstance(facts, Mapping):
            raise AnsibleFilterError("known_host_pairs: the hostvars of %s are not a mapping" % peer)
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
