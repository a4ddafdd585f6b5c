#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ib_bw_check
short_description: Plan RDMA bandwidth tests between the head and the workers, and judge their reports
version_added: "0.2.0"
description:
  - Without O(outputs), returns the exact C(ib_write_bw) server and client
    command lines, one pair per twin of the cabled port for each worker, or
    the C(mpirun ... all_gather_perf) line.
  - With O(outputs) (the clients' stdout, in plan order, or one
    C(all_gather_perf) report), parses them and fails when a twin is below
    O(min_gbps_per_device) or a worker's total is below O(min_gbps_total),
    with the measured figures and a per-device diagnosis (port state and rate,
    MTU, PCIe link).
  - Runs nothing itself; read-only.
options:
  head:
    description: The head's fabric, C({host, twins, addresses, gid_indexes}) (twins as M(laguna.spark.rdma_netdev_info) returns them).
    type: dict
    required: true
  workers:
    description: Each worker's fabric, same shape as O(head).
    type: list
    elements: dict
    required: true
  tool_path:
    description: The ib_write_bw executable.
    type: str
    default: ib_write_bw
  outputs:
    description: The clients' stdout in plan order (ib_write_bw), or the one report (all_gather_perf).
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    description: Only builds command lines and parses outputs; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark,
                                 laguna.spark.bandwidth_plan]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Plan
  laguna.spark.ib_bw_check:
    head: "{{ head_fabric }}"
    workers: "{{ worker_fabrics }}"
  register: plan

- name: Judge the measured outputs
  laguna.spark.ib_bw_check:
    head: "{{ head_fabric }}"
    workers: "{{ worker_fabrics }}"
    outputs: "{{ clients.results | map(attribute='stdout') | list }}"
    min_gbps_per_device: 90
"""

RETURN = r"""
pairs:
  description:
    - One entry per twin and worker, with server_argv (run on the worker), client_argv (run on the head),
      server_address, head_device, worker_device, head_link, worker_link.
    - The role starts every server at once and runs the clients one after the other. client_command and
      server_command are those argvs under C(timeout), the client's at most O(duration) + 60 s, the k-th
      server's (from 0) at most (k + 1) x (O(duration) + 60) s; server_async is the server task's async bound.
  returned: always (ib_write_bw)
  type: list
  elements: dict
argv:
  description: The all_gather_perf command line (run on the head).
  returned: tool is all_gather_perf
  type: list
  elements: str
measurements:
  description: Parsed reports (average_gbps, peak_gbps, device, gid_index, ...), one per pair.
  returned: when outputs are given
  type: list
  elements: dict
totals:
  description: Sum of the averages per worker, Gb/s.
  returned: when outputs are given
  type: dict
threshold_total:
  description: The total threshold applied, Gb/s.
  returned: always
  type: float
problems:
  description: One line per failure, with figures and diagnosis.
  returned: when outputs are given
  type: list
  elements: str
"""

from ansible_collections.laguna.spark.plugins.module_utils import perftest
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        tool=dict(type="str", default="ib_write_bw", choices=["ib_write_bw", "all_gather_perf"]),
        head=dict(type="dict", required=True),
        workers=dict(type="list", elements="dict", required=True),
        tool_path=dict(type="str", default="ib_write_bw"),
        base_port=dict(type="int", default=18515),
        duration=dict(type="int", default=5),
        size=dict(type="int", default=1048576),
        qps=dict(type="int", default=4),
        nccl_env=dict(type="dict", default={}),
        outputs=dict(type="list", elements="str"),
        min_gbps_per_device=dict(type="float", default=90.0),
        min_gbps_total=dict(type="float", default=0.0),
    ))
    p = module.params
    try:
        planned = perftest.plan(p["tool"], p["head"], p["workers"], p["tool_path"], p["base_port"], p["duration"],
                                p["size"], p["qps"], p["nccl_env"], p["min_gbps_per_device"], p["min_gbps_total"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    total = planned["threshold_total"]
    pairs = planned.get("pairs", [])
    result = dict(planned, changed=False)
    if p["outputs"] is None:
        module.exit_json(**result)

    measurements = []
    try:
        if p["tool"] == "all_gather_perf":
            parsed = perftest.parse_all_gather(p["outputs"][0] if p["outputs"] else "")
            for worker in p["workers"]:
                measurements.append(dict(parsed, worker=worker["host"]))
        else:
            if len(p["outputs"]) != len(pairs):
                module.fail_json(msg="%d outputs for %d planned tests" % (len(p["outputs"]), len(pairs)), **result)
            for pair, text in zip(pairs, p["outputs"]):
                measurements.append(dict(perftest.parse_ib_write_bw(text), worker=pair["worker"],
                                         head_device=pair["head_device"], worker_device=pair["worker_device"],
                                         head_link=pair["head_link"], worker_link=pair["worker_link"]))
    except ValueError as exc:
        module.fail_json(msg="cannot read the bandwidth report: %s" % exc, **result)
    ok, totals, problems = perftest.evaluate(measurements, p["min_gbps_per_device"], total)
    result.update(measurements=measurements, totals=totals, problems=problems)
    if not ok:
        module.fail_json(msg="The RoCE link is too slow to serve: " + " | ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
