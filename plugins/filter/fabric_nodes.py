# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""fabric_nodes: the network_gate role's view of every node's fabric, from hostvars."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import peers


def fabric_nodes(hostvars, head, workers, play_hosts_all, fact="fabric_facts"):
    """{nodes, head, workers, fake} (module_utils/peers.fabric_nodes)."""
    if isinstance(workers, (str, bytes)) or isinstance(play_hosts_all, (str, bytes)):
        raise AnsibleFilterError("fabric_nodes: the workers and the play's hosts must be lists of inventory names")

    def facts_of(host):
        try:
            return hostvars[host]
        except KeyError:
            raise KeyError(host)

    try:
        return peers.fabric_nodes(facts_of, head, list(workers), list(play_hosts_all), fact)
    except ValueError as exc:
        raise AnsibleFilterError("fabric_nodes: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"fabric_nodes": fabric_nodes}
