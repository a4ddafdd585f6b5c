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
  wait_free_gpus:
    description:
      - Poll C(ray status) until it shows at least this many free GPUs, for at
        most O(wait_timeout) seconds; then return what it shows last (the
        caller judges). 0 reads once.
      - Ray frees the placement groups of a vLLM that just stopped a few
        seconds after its driver exits; a start judged in between would see
        them still reserved.
    type: int
    default: 0
  wait_timeout:
    description: Seconds O(wait_free_gpus) may wait.
    type: int
    default: 30
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

- name: Before a start, give Ray up to 30 s to free a stopped job's placement groups
  laguna.spark.ray_status:
    ray: /home/spark/.venvs/vllm/bin/ray
    address: 192.168.100.10:6379
    wait_free_gpus: 2
    wait_timeout: 30
"""

RETURN = r"""
waited:
  description: Seconds spent waiting for O(wait_free_gpus) (0 when it was 0).
  returned: always
  type: float
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

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import ray_status


WAIT_DELAY = 2


def read(rc, out):
    """The result fields of one `ray status` run."""
    parsed = ray_status.parse(out if rc == 0 else "")
    gpu = parsed["resources"].get("GPU", {"used": 0.0, "total": 0.0, "reserved": 0.0, "reserved_used": 0.0})
    return dict(
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str", required=True),
            ray=dict(type="path", default="ray"),
            timeout=dict(type="int", default=60),
            fail_on_unreachable=dict(type="bool", default=False),
            wait_free_gpus=dict(type="int", default=0),
            wait_timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    ray_bin = module.params["ray"]
    if "/" not in ray_bin:
        ray_bin = module.get_bin_path(ray_bin, required=True)
    argv = ["timeout", str(module.params["timeout"]), ray_bin, "status",
            "--address", module.params["address"]]
    start = time.monotonic()
    deadline = start + max(0, module.params["wait_timeout"])
    while True:
        rc, out, err = module.run_command(argv, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
        result = read(rc, out)
        if (result["gpus_free"] >= module.params["wait_free_gpus"] or rc != 0
                or time.monotonic() + WAIT_DELAY > deadline):
            break
        time.sleep(WAIT_DELAY)
    result["waited"] = round(time.monotonic() - start, 1) if module.params["wait_free_gpus"] else 0.0
    if rc != 0:
        result["stderr_tail"] = err.strip().splitlines()[-5:]
        if module.params["fail_on_unreachable"]:
            module.fail_json(
                msg="`ray status --address %s` failed (rc=%d): is the head raylet running? %s"
                % (module.params["address"], rc, " | ".join(result["stderr_tail"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
