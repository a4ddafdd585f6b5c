# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""fabric_environment: the NCCL/Gloo/vLLM environment of this node's raylets (plugins/module_utils/cluster_units.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import cluster_units

fabric_environment = cluster_units.as_filter("fabric_environment", cluster_units.fabric_environment, AnsibleFilterError)


class FilterModule(object):
    def filters(self):
        return {"fabric_environment": fabric_environment}
