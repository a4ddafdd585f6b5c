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
  wait_nodes:
    description:
      - Poll C(ray status) until it shows at least this many active nodes
        and O(wait_gpus) GPUs, for at most O(wait_timeout) seconds, also while
        the head does not answer yet; then return what it shows last (the
        caller judges). 0 (with O(wait_gpus) 0) reads once.
      - Each C(ray status) gets at most the time left, so the whole wait is
        bounded by O(wait_timeout), even when the head is gone.
    type: int
    default: 0
  wait_gpus:
    description: GPUs that O(wait_nodes) waits for (in total, free or not).
    type: float
    default: 0
  wait_timeout:
    description: Seconds O(wait_free_gpus) or O(wait_nodes) may wait.
    type: int
    default: 30
  wait_delay:
    description: Seconds between two polls.
    type: float
    default: 2
attributes:
  check_mode:
    support: full
    description: Only runs C(ray status); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait up to 300 s for two nodes and two GPUs
  laguna.spark.ray_status:
    ray: /home/spark/.venvs/vllm/bin/ray
    address: 192.168.100.10:6379
    wait_nodes: 2
    wait_gpus: 2
    wait_timeout: 300
    wait_delay: 5
  register: ray

- name: Before a start, give Ray up to 30 s to free a stopped job's placement groups
  laguna.spark.ray_status:
    ray: /home/spark/.venvs/vllm/bin/ray
    address: 192.168.100.10:6379
    wait_free_gpus: 2
    wait_timeout: 30
"""

RETURN = r"""
waited:
  description: Seconds spent waiting for O(wait_free_gpus) or O(wait_nodes) (0 when there was nothing to wait for).
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

from ansible_collections.laguna.spark.plugins.module_utils import ray_status
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


WAIT_DELAY = 2


def read(rc, out):
    """The result fields of one `ray status` run."""
    return dict(changed=False, **ray_status.summary(rc, out))


def done(result, rc, params):
    """Whether a wait is over: what it waits for is there (a GPU wait also
    ends when the head does not answer; a node wait goes on)."""
    if params["wait_nodes"] > 0 or params["wait_gpus"] > 0:
        if rc != 0 or result["node_count"] < params["wait_nodes"] or result["gpus_total"] < params["wait_gpus"]:
            return False
    return rc != 0 or result["gpus_free"] >= params["wait_free_gpus"]


def main():
    module = new_module(dict(
        address=dict(type="str", required=True),
        ray=dict(type="path", default="ray"),
        timeout=dict(type="int", default=60),
        fail_on_unreachable=dict(type="bool", default=False),
        wait_free_gpus=dict(type="int", default=0),
        wait_nodes=dict(type="int", default=0),
        wait_gpus=dict(type="float", default=0),
        wait_timeout=dict(type="int", default=30),
        wait_delay=dict(type="float", default=WAIT_DELAY),
    ))
    ray_bin = module.params["ray"]
    if "/" not in ray_bin:
        ray_bin = module.get_bin_path(ray_bin, required=True)
    p = module.params
    waiting = p["wait_free_gpus"] > 0 or p["wait_nodes"] > 0 or p["wait_gpus"] > 0
    start = time.monotonic()
    deadline = start + max(0, p["wait_timeout"])
    while True:
        # Never past the deadline: a `ray status` against a head that is gone
        # takes its whole timeout.
        left = int(deadline - time.monotonic()) if waiting else p["timeout"]
        argv = ["timeout", str(max(5, min(p["timeout"], left))), ray_bin, "status", "--address", p["address"]]
        rc, out, err = module.run_command(argv, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
        result = read(rc, out)
        if done(result, rc, p) or time.monotonic() + p["wait_delay"] > deadline:
            break
        time.sleep(p["wait_delay"])
    result["waited"] = round(time.monotonic() - start, 1) if waiting else 0.0
    if rc != 0:
        result["stderr_tail"] = err.strip().splitlines()[-5:]
        if module.params["fail_on_unreachable"]:
            module.fail_json(
                msg="`ray status --address %s` failed (rc=%d): is the head raylet running? %s"
                % (module.params["address"], rc, " | ".join(result["stderr_tail"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
