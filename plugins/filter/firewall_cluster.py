# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""firewall_cluster: the cluster's nodes as the firewall_rules module takes them
(the logic: cluster_nodes() in plugins/module_utils/firewall.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import firewall
from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars


def firewall_cluster(hosts, hostvars, default_prefix=24):
    """[{name, addresses, roce_ip, roce_prefix, twin_addresses}] of the cluster's hosts, from their hostvars."""
    hosts = [host for host, _vars in host_vars(hosts, hostvars, AnsibleFilterError, "firewall_cluster")]
    try:
        return firewall.cluster_nodes(hosts, hostvars, default_prefix)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("firewall_cluster: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"firewall_cluster": firewall_cluster}
