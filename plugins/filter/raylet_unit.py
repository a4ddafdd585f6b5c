# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""raylet_unit: the command line, environment and unit properties of this node's raylet (plugins/module_utils/cluster_units.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import cluster_units

raylet_unit = cluster_units.as_filter("raylet_unit", cluster_units.raylet_unit, AnsibleFilterError)


class FilterModule(object):
    def filters(self):
        return {"raylet_unit": raylet_unit}
