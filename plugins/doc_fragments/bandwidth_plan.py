# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that plan the RDMA bandwidth tests (ib_bw_check, and the network_gate role's probe
    network_gate_probe)."""

    DOCUMENTATION = r"""
options:
  tool:
    description: Which test.
    type: str
    choices: [ib_write_bw, all_gather_perf]
    default: ib_write_bw
  base_port:
    description: TCP port of the first twin's test; the next twins use the following ports.
    type: int
    default: 18515
  duration:
    description: Seconds each test runs.
    type: int
    default: 5
  size:
    description: Message size in bytes.
    type: int
    default: 1048576
  qps:
    description: Queue pairs per test.
    type: int
    default: 4
  nccl_env:
    description: NCCL environment exported to the all_gather_perf ranks.
    type: dict
    default: {}
  min_gbps_per_device:
    description: Lowest acceptable average of one twin (ib_write_bw only).
    type: float
    default: 90.0
  min_gbps_total:
    description: Lowest acceptable sum over a worker's twins; 0 means O(min_gbps_per_device) times the number of twins.
    type: float
    default: 0.0
"""
