#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_status
short_description: Run C(ray status) against a cluster and return what it shows
version_added: "0.1.0"
description:
  - Runs C(ray status --address ADDRESS) with the given C(ray) executable and
    parses the active and pending nodes, recent failures, pending resource
    demands (such as placement groups vLLM is waiting for) and resource usage.
  - A cluster that cannot be reached is not an error unless O(fail_on_unreachable)
    is set; RV(reachable) says so, which lets a role poll with C(until).
  - Read-only; supports check mode.
options:
  address:
    description: GCS address of the head, C(host:port).
    type: str
    required: true
  ray:
    description: Path of the C(ray) executable (the one in the vLLM venv).
    type: path
    default: ray
  timeout:
    description: Seconds to let C(ray status) run.
    type: int
    default: 60
  fail_on_unreachable:
    description: Fail when C(ray status) cannot reach the cluster.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Only runs C(ray status); the same result in check mode.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Linux (DGX Spark, Ubuntu 24.04).
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait for two nodes and two GPUs
  laguna.spark.ray_status:
    ray: /home/spark/.venvs/vllm/bin/ray
    address: 192.168.100.10:6379
  register: ray
  until: ray.node_count >= 2 and ray.gpus_total >= 2
  retries: 30
  delay: 5
"""

RETURN = r"""
reachable:
  description: Whether C(ray status) answered.
  returned: always
  type: bool
node_count:
  description: Number of active nodes.
  returned: always
  type: int
active_nodes:
  description: Ids of the active nodes.
  returned: always
  type: list
  elements: str
pending_nodes:
  description: Ids of pending nodes.
  returned: always
  type: list
  elements: str
recent_failures:
  description: Lines of the "Recent failures" section.
  returned: always
  type: list
  elements: str
pending_demands:
  description: Resource demands Ray cannot place yet (e.g. a TP placement group).
  returned: always
  type: list
  elements: str
gpus_total:
  description: GPUs the cluster has.
  returned: always
  type: float
gpus_used:
  description: GPUs in use (reserved by placement groups or actors).
  returned: always
  type: float
gpus_reserved:
  description: GPUs held by placement groups (a serving vLLM holds one per TP rank).
  returned: always
  type: float
gpus_free:
  description:
    - GPUs nobody holds, neither an actor or task nor a placement group
      (another Ray job, or a vLLM, holding one leaves it out).
  returned: always
  type: float
resources:
  description: Every resource of the usage section, C({used, total, reserved}); bytes for memory.
  returned: always
  type: dict
stdout:
  description: What C(ray status) printed.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import ray_status


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str", required=True),
            ray=dict(type="path", default="ray"),
            timeout=dict(type="int", default=60),
            fail_on_unreachable=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    ray_bin = module.params["ray"]
    if "/" not in ray_bin:
        ray_bin = module.get_bin_path(ray_bin, required=True)
    argv = ["timeout", str(module.params["timeout"]), ray_bin, "status",
            "--address", module.params["address"]]
    rc, out, err = module.run_command(argv, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
    parsed = ray_status.parse(out if rc == 0 else "")
    resources = parsed["resources"]
    gpu = resources.get("GPU", {"used": 0.0, "total": 0.0, "reserved": 0.0, "reserved_used": 0.0})
    result = dict(
        changed=False,
        reachable=rc == 0,
        node_count=len(parsed["active_nodes"]),
        gpus_total=gpu["total"],
        gpus_used=gpu["used"],
        gpus_reserved=gpu["reserved"],
        gpus_free=ray_status.free(gpu),
        stdout=out,
        **parsed
    )
    if rc != 0:
        result["stderr_tail"] = err.strip().splitlines()[-5:]
        if module.params["fail_on_unreachable"]:
            module.fail_json(
                msg="`ray status --address %s` failed (rc=%d): is the head raylet running? %s"
                % (module.params["address"], rc, " | ".join(result["stderr_tail"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
