#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_cluster_probe
short_description: Read in one call everything the ray_cluster role checks on a node
version_added: "0.3.0"
description:
  - The ray_cluster role's probe. Reads this node's raylet unit as
    M(laguna.spark.systemd_run_service) with O(unit) would (the same code,
    deciding only) - C(systemctl --user show) of its LoadState, ActiveState,
    SubState, Result, MainPID, Description (the configuration's fingerprint),
    FragmentPath and UnitFileState; the unit file, start-env script and
    secret environment file against the ones rendered from O(unit); the
    unit's processes that a signal stopped; with a persistent unit, the
    resolved variables of its running process.
  - Reads the Ray token file O(token_path) - its sha256 digest (RV(token)),
    generation and mode, never the token - and, on the head, whether
    M(laguna.spark.ray_auth_token) with O(token_generation) would make or
    rotate it. The unit's secret environment is the token in that file
    (O(secret_name)); the role compares a worker's digest with the head's.
  - Reads lingering (C(loginctl show-user)) for the role's report.
  - On the head (O(is_head)) with a unit that runs as wanted, runs C(ray
    status) once (bounded by O(status_timeout), as M(laguna.spark.ray_status)
    runs it) and compares its nodes and GPUs with O(expected_nodes) and
    O(expected_gpus).
  - Returns one line per difference (RV(differences)); read-only.
options:
  is_head:
    description: Whether this node runs the Ray head (then C(ray status) is read here).
    type: bool
    required: true
  unit:
    description:
      - The raylet unit as the role's C(Run the head raylet) / C(Run the worker raylets) task passes it to
        M(laguna.spark.systemd_run_service) (same names and meanings), without the secret environment.
    type: dict
    required: true
    suboptions:
      name:
        description: Unit name, without C(.service).
        type: str
        required: true
      description:
        description: The unit's description (its fingerprint is appended).
        type: str
        default: laguna-spark service
      command:
        description: The raylet's command line.
        type: list
        elements: str
        required: true
      environment:
        description: Its environment.
        type: dict
        default: {}
      properties:
        description: Its unit properties.
        type: dict
        default: {}
      persistent:
        description: Whether it runs from an enabled unit file.
        type: bool
        default: false
      start_env_script:
        description: The start-env script of a persistent unit.
        type: str
      start_env_keys:
        description: The variables the script resolves.
        type: list
        elements: str
        default: []
      restart_sec:
        description: C(RestartSec=) of a persistent unit.
        type: int
        default: 10
      start_limit_interval:
        description: C(StartLimitIntervalSec=) of a persistent unit.
        type: int
        default: 600
      start_limit_burst:
        description: C(StartLimitBurst=) of a persistent unit.
        type: int
        default: 20
      runtime_dir:
        description: The user's runtime directory (C(/run/user/UID) by default).
        type: path
      unit_dir:
        description: Where persistent unit files go (C(~/.config/systemd/user) by default).
        type: path
  token_path:
    description:
      - The Ray token file. Omitted (Ray without authentication), no token is read and the unit has no secret
        environment.
    type: path
  token_generation:
    description:
      - On the head, the wanted generation of the token
        (M(laguna.spark.ray_auth_token)'s O(laguna.spark.ray_auth_token#module:generation)).
    type: int
  secret_name:
    description: The variable of the unit's secret environment that holds the token.
    type: str
    default: RAY_AUTH_TOKEN
  ray:
    description: Path of the C(ray) executable; omitted, C(ray status) is not read.
    type: path
  address:
    description: The head's GCS address, C(host:port).
    type: str
    default: ""
  status_timeout:
    description: Seconds C(ray status) may take.
    type: int
    default: 60
  expected_nodes:
    description: Nodes C(ray status) must show.
    type: int
    default: 1
  expected_gpus:
    description: GPUs C(ray status) must show.
    type: float
    default: 1
attributes:
  check_mode:
    support: full
    description: Only reads (C(systemctl show), C(loginctl), C(ray status)); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the raylet, the Ray token and the cluster
  laguna.spark.ray_cluster_probe:
    is_head: true
    unit:
      name: laguna-ray-head
      description: laguna-spark Ray head on 192.168.100.10
      command: [/home/spark/venvs/vllm/bin/ray, start, --head, --block, --port, "6379"]
      environment: {NCCL_IB_GID_INDEX: "3"}
      properties: {LimitMEMLOCK: infinity, MemoryMax: 98G, MemorySwapMax: "0"}
    token_path: /home/spark/.ray/auth_token
    token_generation: 1
    ray: /home/spark/venvs/vllm/bin/ray
    address: 192.168.100.10:6379
    expected_nodes: 2
    expected_gpus: 2
  become: true
  become_user: spark
  register: ray_cluster_probe
"""

RETURN = r"""
differences:
  description: One line per difference from what the role wants.
  returned: always
  type: list
  elements: str
  sample: ["laguna-ray-worker.service: active but its processes 812, 813 are stopped (SIGSTOP), wanted running"]
change:
  description: Whether the raylet task (M(laguna.spark.systemd_run_service) with O(unit)) would change the unit.
  returned: always
  type: bool
action:
  description: What that task would do (C(none), C(started), C(restarted), C(enabled)).
  returned: always
  type: str
unit:
  description: The unit's full name.
  returned: always
  type: str
  sample: laguna-ray-head.service
active_state:
  description: Its ActiveState.
  returned: always
  type: str
sub_state:
  description: Its SubState.
  returned: always
  type: str
result:
  description: Its Result.
  returned: always
  type: str
loaded:
  description: Whether systemd has the unit loaded at all.
  returned: always
  type: bool
unit_file_state:
  description: Its UnitFileState (empty for a transient unit).
  returned: always
  type: str
stopped_pids:
  description: The unit's processes a signal stopped (SIGSTOP).
  returned: always
  type: list
  elements: int
fingerprint:
  description: The fingerprint of the wanted configuration.
  returned: always
  type: str
previous_fingerprint:
  description: The fingerprint in the unit's description, if any.
  returned: always
  type: str
token:
  description:
    - The token file - exists, digest (the first 16 hex digits of its sha256), generation, mode, and reason (why
      M(laguna.spark.ray_auth_token) would change it here, or null). Empty without O(token_path).
  returned: always
  type: dict
  sample: {"exists": true, "digest": "3f1c0a9be2d47a61", "generation": 1, "mode": "0600", "reason": null}
linger:
  description: What loginctl says of lingering for the user (C(yes), C(no), C(unknown ...)).
  returned: always
  type: str
ray_status:
  description:
    - On the head with a unit as wanted, M(laguna.spark.ray_status)'s result (without its stdout) plus C(rc);
      else empty.
  returned: always
  type: dict
ray_status_ok:
  description: Whether RV(ray_status) was read and shows O(expected_nodes) and O(expected_gpus).
  returned: always
  type: bool
"""

from ansible_collections.laguna.spark.plugins.module_utils import ray_cluster_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

UNIT_OPTIONS = dict(
    name=dict(type="str", required=True),
    description=dict(type="str", default="laguna-spark service"),
    command=dict(type="list", elements="str", required=True),
    environment=dict(type="dict", default={}),
    properties=dict(type="dict", default={}),
    persistent=dict(type="bool", default=False),
    start_env_script=dict(type="str"),
    start_env_keys=dict(type="list", elements="str", default=[], no_log=False),
    restart_sec=dict(type="int", default=10),
    start_limit_interval=dict(type="int", default=600),
    start_limit_burst=dict(type="int", default=20),
    runtime_dir=dict(type="path"),
    unit_dir=dict(type="path"),
)


def main():
    module = new_module(dict(
        is_head=dict(type="bool", required=True),
        unit=dict(type="dict", required=True, options=UNIT_OPTIONS),
        token_path=dict(type="path", no_log=False),
        token_generation=dict(type="int", no_log=False),
        secret_name=dict(type="str", default="RAY_AUTH_TOKEN", no_log=False),
        ray=dict(type="path"),
        address=dict(type="str", default=""),
        status_timeout=dict(type="int", default=60),
        expected_nodes=dict(type="int", default=1),
        expected_gpus=dict(type="float", default=1),
    ))
    module.exit_json(changed=False, **ray_cluster_probe.probe(module, module.params))


if __name__ == "__main__":
    main()
