# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""benchmark_sweep, benchmark_drafts_as_planned, benchmark_memory: the decisions of playbooks/benchmark.yml
(the logic: plugins/module_utils/bench_plan.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import bench_plan


def benchmark_sweep(k_values, baseline=True, restart=True, speculative=True, k=None):
    """{plan, configured}: the configurations to measure, in order, and the configured one."""
    if isinstance(k_values, (str, bytes)) or not hasattr(k_values, "__iter__"):
        raise AnsibleFilterError("benchmark_sweep: the k values must be a list of integers, not %r" % (k_values,))
    try:
        return bench_plan.sweep(list(k_values), baseline=baseline, restart=restart, speculative=speculative, k=k)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("benchmark_sweep: %s" % exc)


def benchmark_drafts_as_planned(decode, step):
    """Whether the server measured for ``step`` drafts as the step says (from a vllm_bench decode result)."""
    if not isinstance(decode, Mapping) or not isinstance(step, Mapping):
        raise AnsibleFilterError("benchmark_drafts_as_planned: the input must be a vllm_bench result and step a plan step")
    spec = decode.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise AnsibleFilterError("benchmark_drafts_as_planned: the result's spec must be a mapping")
    try:
        return bench_plan.drafts_as_planned(dict(step), dict(spec))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("benchmark_drafts_as_planned: %s" % exc)


def benchmark_memory(reads, head):
    """[{host, role, meminfo}] of the nodes whose /proc/meminfo the playbook read."""
    if isinstance(reads, (str, bytes)) or not hasattr(reads, "__iter__"):
        raise AnsibleFilterError("benchmark_memory: the input must be the results of the meminfo reads")
    try:
        return bench_plan.node_memory(list(reads), head)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("benchmark_memory: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"benchmark_sweep": benchmark_sweep, "benchmark_drafts_as_planned": benchmark_drafts_as_planned,
                "benchmark_memory": benchmark_memory}
