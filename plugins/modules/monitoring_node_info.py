#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: monitoring_node_info
short_description: What the monitoring role needs to know of a node before it installs anything
version_added: "0.4.0"
description:
  - Says which of O(packages) are not installed (C(dpkg-query)), which ones an earlier run of the role
    recorded as installed by it (O(state_dir)C(/installed.json), what teardown removes), the mount
    point of the file system that holds O(path) (of its nearest existing parent when it does not exist
    yet), and whether the venv's Ray can run its metrics agent.
  - Ray 2.60 starts each node's dashboard agent with C(--minimal) when C(ray.dashboard.optional_deps)
    cannot be imported (C(ray._private.utils.get_dashboard_dependency_error())); a minimal agent loads
    no reporter module, so nothing listens on the metrics export port. The module imports that module
    with O(python), as Ray does, without writing bytecode.
  - Read-only. The same reads as M(laguna.spark.monitoring_probe) (the role's one read), without the files,
    the units and Prometheus.
options:
  packages:
    description: Debian packages to look for.
    type: list
    elements: str
    default: []
  path:
    description: A path whose file system matters (the models).
    type: path
    required: true
  python:
    description: The venv's python (C(laguna_venv)/bin/python).
    type: path
    required: true
  state_dir:
    description: Where the role records what it installed.
    type: path
    default: /etc/laguna-spark/monitoring
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.read_only,
                                 laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the node
  laguna.spark.monitoring_node_info:
    packages: [prometheus-node-exporter]
    path: /home/spark/models/hf/Laguna-S-2.1-FP8
    python: /home/spark/venvs/vllm-025/bin/python
  register: monitoring_node
"""

RETURN = r"""
missing:
  description: The packages of O(packages) that are not installed, in that order.
  returned: always
  type: list
  elements: str
recorded:
  description: The packages an earlier run recorded as installed by the role (sorted; empty without a record).
  returned: always
  type: list
  elements: str
mountpoint:
  description: The mount point of the file system holding O(path).
  returned: always
  type: str
  sample: /
python_found:
  description: Whether O(python) exists.
  returned: always
  type: bool
ray_metrics:
  description: Whether the venv's Ray imports its dashboard's dependencies (so its agents export metrics).
  returned: always
  type: bool
ray_metrics_error:
  description: Why not, the import's last line (empty when it works).
  returned: always
  type: str
"""

from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module
from ansible_collections.laguna.spark.plugins.module_utils.monitoring_probe import node_info


def main():
    module = new_module(dict(
        packages=dict(type="list", elements="str", default=[]),
        path=dict(type="path", required=True),
        python=dict(type="path", required=True),
        state_dir=dict(type="path", default="/etc/laguna-spark/monitoring"),
    ))
    result = node_info(module, module.params["packages"], module.params["path"], module.params["python"],
                       module.params["state_dir"])
    result.pop("packages")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
