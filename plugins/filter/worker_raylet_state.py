# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""worker_raylet_state: whether a worker raylet is started or restarted (plugins/module_utils/cluster_units.py)."""

from __future__ import annotations

from ansible_collections.laguna.spark.plugins.module_utils import cluster_units


def worker_raylet_state(head_host, hostvars):
    """The state "restarted" when this run changed the head's raylet, else "started"."""
    return cluster_units.worker_raylet_state(head_host, hostvars)


class FilterModule(object):
    def filters(self):
        return {"worker_raylet_state": worker_raylet_state}
