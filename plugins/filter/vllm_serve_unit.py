# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""vllm_serve_unit: the command line, environment and unit properties of vllm serve (plugins/module_utils/cluster_units.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import cluster_units

vllm_serve_unit = cluster_units.as_filter("vllm_serve_unit", cluster_units.vllm_serve_unit, AnsibleFilterError)


class FilterModule(object):
    def filters(self):
        return {"vllm_serve_unit": vllm_serve_unit}
