# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""benchmark_sweep, benchmark_drafts_as_planned, benchmark_memory: the decisions of playbooks/benchmark.yml
(the logic: plugins/module_utils/bench_plan.py); benchmark_step_done, benchmark_ttft, benchmark_log_lines:
what its results.json keeps of each measurement (the journal's lines: plugins/module_utils/vllm_log.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import bench_plan, vllm_log

# What Ansible adds to a task's result (and to each of a loop's), not the module's.
_DECODE_DROPPED = ("invocation", "changed", "failed")
_TTFT_DROPPED = ("invocation", "changed", "ansible_loop_var")


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


def _without(result, keys):
    return dict((key, value) for key, value in result.items() if key not in keys)


_MEASURED = object()


def benchmark_step_done(done, step, decode=None, greedy=None, error=_MEASURED):
    """The steps done so far with ``step``'s record added: measured (its vllm_bench decode and greedy
    results) or, with ``error``, failed."""
    if isinstance(done, (str, bytes, Mapping)) or not hasattr(done, "__iter__"):
        raise AnsibleFilterError("benchmark_step_done: the input must be the list of the steps done")
    if not isinstance(step, Mapping) or "speculative" not in step or "k" not in step:
        raise AnsibleFilterError("benchmark_step_done: step must be a plan step {speculative, k}")
    record = {"speculative": step["speculative"], "k": step["k"]}
    if error is not _MEASURED:
        record.update(ok=False, error=error, decode={}, greedy={})
    else:
        if not isinstance(decode, Mapping) or not isinstance(greedy, Mapping):
            raise AnsibleFilterError("benchmark_step_done: a measured step needs its decode and greedy results")
        record.update(ok=True, decode=_without(decode, _DECODE_DROPPED),
                      greedy={"outputs": greedy.get("outputs", [])})
    return list(done) + [record]


def benchmark_ttft(results):
    """The TTFT loop's results (vllm_bench, measure=ttft) as results.json keeps them."""
    if isinstance(results, (str, bytes, Mapping)) or not hasattr(results, "__iter__"):
        raise AnsibleFilterError("benchmark_ttft: the input must be the results of the TTFT loop")
    if not all(isinstance(result, Mapping) for result in results):
        raise AnsibleFilterError("benchmark_ttft: each result must be a mapping")
    return [_without(result, _TTFT_DROPPED) for result in results]


def benchmark_log_lines(lines):
    """The lines of vLLM's journal that vllm_log reads (vllm_log.ANY), in order."""
    if isinstance(lines, (str, bytes)) or not hasattr(lines, "__iter__"):
        raise AnsibleFilterError("benchmark_log_lines: the input must be the journal's lines (stdout_lines)")
    return [line for line in lines if re.search(vllm_log.ANY, str(line))]


class FilterModule(object):
    def filters(self):
        return {"benchmark_sweep": benchmark_sweep, "benchmark_drafts_as_planned": benchmark_drafts_as_planned,
                "benchmark_memory": benchmark_memory, "benchmark_step_done": benchmark_step_done,
                "benchmark_ttft": benchmark_ttft, "benchmark_log_lines": benchmark_log_lines}
