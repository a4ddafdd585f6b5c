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
  - Read-only.
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

import os

from ansible_collections.laguna.spark.plugins.module_utils import files
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

# What Ray 2.60 imports to decide whether the agents are minimal (ray/_private/utils.py).
RAY_DEPS_CHECK = "import ray.dashboard.optional_deps"


def mountpoint(path):
    """The mount point of the file system holding ``path`` or, when it does not exist, its nearest existing parent."""
    return files.nearest(os.path.realpath(files.nearest(os.path.abspath(path), os.path.exists)), os.path.ismount)


def ray_agent_error(run_command, python):
    """Why the venv's Ray runs minimal agents ("" when it does not): the last line of the import's error.

    ``run_command`` is AnsibleModule.run_command (argv, environ_update) -> (rc, out, err)."""
    rc, _out, err = run_command([python, "-c", RAY_DEPS_CHECK], environ_update={"PYTHONDONTWRITEBYTECODE": "1"})
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return "" if rc == 0 else (lines[-1] if lines else "exit status %d" % rc)


def recorded(state_dir):
    found = files.read_json(os.path.join(state_dir, "installed.json"), default=[])
    return sorted(str(p) for p in found) if isinstance(found, list) else []


def main():
    module = new_module(dict(
        packages=dict(type="list", elements="str", default=[]),
        path=dict(type="path", required=True),
        python=dict(type="path", required=True),
        state_dir=dict(type="path", default="/etc/laguna-spark/monitoring"),
    ))
    missing = []
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    for package in module.params["packages"]:
        rc, out, _err = module.run_command([dpkg_query, "-W", "-f", "${db:Status-Status}", package])
        if rc != 0 or out.strip() != "installed":
            missing.append(package)
    python = module.params["python"]
    found = os.access(python, os.X_OK)
    error = "%s does not exist" % python
    if found:
        error = ray_agent_error(module.run_command, python)
    module.exit_json(changed=False, missing=missing, recorded=recorded(module.params["state_dir"]),
                     mountpoint=mountpoint(module.params["path"]), python_found=found,
                     ray_metrics=found and error == "", ray_metrics_error=error)


if __name__ == "__main__":
    main()
