#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: monitoring_probe
short_description: Read in one call everything the monitoring role checks on a node
version_added: "0.4.0"
description:
  - The monitoring role's probe. Reads the dpkg status of each of O(packages) (C(dpkg-query -W -f
    '${db:Status-Status}'), installed when it prints C(installed)), what an earlier run recorded in O(state_dir)
    (C(installed.json), the packages the role installed; C(<package>.default), the kept C(/etc/default) file of a
    package installed before the role) and whether O(state_dir) is a directory C(root:root) C(0755); the mount
    point of O(path) and whether the venv's Ray can run its metrics agent (as M(laguna.spark.monitoring_node_info));
    each of O(files) against the content the controller rendered (sha1, as M(ansible.builtin.copy) compares it,
    owner, group and mode); each of O(units) with C(systemctl show) (C(LoadState), C(ActiveState), C(SubState),
    C(UnitFileState)); and, with O(ready_url), one C(GET) of Prometheus's C(/-/ready).
  - Returns, besides each read, one line per difference (RV(differences)) and what the role acts on
    (RV(missing), RV(record), RV(defaults_to_keep), RV(state_dir_differences), RV(to_write), RV(units_to_run),
    RV(ready)), so that the role changes exactly what differs and check mode says what a run would change.
  - A unit is as wanted when it is loaded, its C(ActiveState) is C(active) or C(activating) (what
    M(ansible.builtin.systemd_service)'s C(started) leaves alone) and its C(UnitFileState) is one for which
    C(systemctl is-enabled) succeeds (C(enabled), C(enabled-runtime), C(static), C(alias), C(indirect),
    C(generated), C(transient)).
  - Read-only; every read is optional (an option left out is not read).
options:
  packages:
    description: Debian packages that must be installed.
    type: list
    elements: str
    default: []
  path:
    description: A path whose file system matters (the models); omitted, RV(mountpoint) is null.
    type: path
  python:
    description: The venv's python (C(laguna_venv)/bin/python); omitted, Ray is not asked.
    type: path
  state_dir:
    description: Where the role records what it installed; omitted, nothing recorded is read.
    type: path
  files:
    description: The files the role writes, with the content the controller rendered.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: What it must hold.
        type: str
        required: true
      mode:
        description: Its mode, octal.
        type: str
        default: "0644"
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group.
        type: str
        default: root
  units:
    description: System units (a name without a suffix is a C(.service)) that must run and be enabled.
    type: list
    elements: str
    default: []
  ready_url:
    description: Prometheus's C(/-/ready), which must answer 200; omitted, not asked.
    type: str
  ready_timeout:
    description: Seconds the C(GET) of O(ready_url) may take.
    type: int
    default: 5
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.read_only,
                                 laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the node exporter's node
  laguna.spark.monitoring_probe:
    packages: [prometheus-node-exporter]
    path: /home/spark/models/hf/Laguna-S-2.1-FP8
    python: /home/spark/venvs/vllm-025/bin/python
    state_dir: /etc/laguna-spark/monitoring
    units: [prometheus-node-exporter]
    files:
      - path: /etc/default/prometheus-node-exporter
        content: "ARGS=\"--web.listen-address=127.0.0.1:9100\"\n"
  become: true
  become_user: spark
  register: monitoring_node
"""

RETURN = r"""
packages:
  description: Each of O(packages) with its dpkg status ("" when not installed at all).
  returned: always
  type: dict
  sample: {"prometheus-node-exporter": "installed"}
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
record:
  description: Whether C(installed.json) lacks a package of RV(missing) (the role records it before installing).
  returned: always
  type: bool
defaults_to_keep:
  description: The installed packages not recorded whose C(/etc/default) file is not kept in O(state_dir) yet.
  returned: always
  type: list
  elements: str
state_dir_differences:
  description: What differs of O(state_dir) from a directory C(root:root) C(0755) (empty when as wanted).
  returned: always
  type: list
  elements: str
mountpoint:
  description: The mount point of the file system holding O(path) (null without O(path)).
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
files:
  description: Each of O(files) as found (path, exists, checksum, wanted_checksum, mode, owner, group, differences).
  returned: always
  type: list
  elements: dict
to_write:
  description: The paths of O(files) that differ (content, owner, group or mode) or are missing.
  returned: always
  type: list
  elements: str
units:
  description: Each of O(units) with its LoadState, ActiveState, SubState and UnitFileState.
  returned: always
  type: dict
  sample: {"prometheus": {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
           "UnitFileState": "enabled"}}
units_to_run:
  description: The units of O(units) not loaded, not running or not enabled.
  returned: always
  type: list
  elements: str
ready:
  description: Whether O(ready_url) answered 200 (true without O(ready_url)).
  returned: always
  type: bool
ready_error:
  description: Why not (empty when ready).
  returned: always
  type: str
differences:
  description: One line per difference from what the monitoring role wants.
  returned: always
  type: list
  elements: str
  sample: ["prometheus.service: ActiveState inactive (SubState dead), wanted active"]
"""

from ansible.module_utils.urls import open_url

from ansible_collections.laguna.spark.plugins.module_utils import monitoring_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        packages=dict(type="list", elements="str", default=[]),
        path=dict(type="path"),
        python=dict(type="path"),
        state_dir=dict(type="path"),
        files=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True),
            content=dict(type="str", required=True, no_log=False),
            mode=dict(type="str", default="0644"),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
        )),
        units=dict(type="list", elements="str", default=[]),
        ready_url=dict(type="str"),
        ready_timeout=dict(type="int", default=5),
    ))
    for item in module.params["files"]:
        try:
            int(item["mode"], 8)
        except ValueError:
            module.fail_json(msg="files: mode %r of %s is not octal" % (item["mode"], item["path"]))
    module.exit_json(changed=False, **monitoring_probe.probe(module, module.params, open_url))


if __name__ == "__main__":
    main()
