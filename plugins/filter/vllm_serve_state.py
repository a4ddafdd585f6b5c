# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""vllm_serve_state: whether vllm serve is started or restarted (plugins/module_utils/cluster_units.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import cluster_units


def vllm_serve_state(cluster_hosts, hostvars, head_host, health_state, persistent, check_mode=False):
    """The state "restarted" when vLLM's cluster or server is gone (in check
    mode also when a worker raylet would restart), else "started"."""
    if isinstance(cluster_hosts, (str, bytes)) or not hasattr(cluster_hosts, "__iter__"):
        raise AnsibleFilterError("vllm_serve_state: the cluster's hosts must be a list of inventory host names")
    return cluster_units.vllm_serve_state(list(cluster_hosts), hostvars, head_host, health_state, persistent,
                                          check_mode)


class FilterModule(object):
    def filters(self):
        return {"vllm_serve_state": vllm_serve_state}
