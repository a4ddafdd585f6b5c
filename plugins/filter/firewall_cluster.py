# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""firewall_cluster: the cluster's nodes as the firewall_rules module takes them
(the logic: cluster_nodes() in plugins/module_utils/firewall.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import firewall


def firewall_cluster(hosts, hostvars, default_prefix=24):
    """[{name, addresses, roce_ip, roce_prefix, twin_addresses}] of the cluster's hosts, from their hostvars."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("firewall_cluster: the input must be a list of inventory host names")
    hosts = list(hosts)
    for host in hosts:
        try:
            node = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("firewall_cluster: %s is not in the inventory" % host)
        if not isinstance(node, Mapping):
            raise AnsibleFilterError("firewall_cluster: the hostvars of %s are not a mapping" % host)
    try:
        return firewall.cluster_nodes(hosts, hostvars, default_prefix)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("firewall_cluster: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"firewall_cluster": firewall_cluster}
