# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What playbooks/benchmark.yml measures, and in what order (through the
laguna.spark.benchmark_sweep, benchmark_drafts_as_planned and benchmark_memory
filters).

A step is ``{"speculative": bool, "k": int or None}``: ``k`` is None without
the draft. sweep() plans the configurations; drafts_as_planned() checks that
the server measured for a step drafts as planned; node_memory() turns the
playbook's /proc/meminfo reads into the report's per-node entries.
"""

from __future__ import annotations

import base64


def step(speculative, k):
    """The plan step of a server setting: k only with the draft."""
    return {"speculative": bool(speculative), "k": int(k) if speculative else None}


def sweep(k_values, baseline=True, restart=True, speculative=True, k=None):
    """{"plan": [step, ...], "configured": step} of the benchmark.

    Without ``restart`` the plan is the configured setting alone (the running
    server is measured as it is). Otherwise: the baseline without the draft
    (when ``baseline``), then each k of ``k_values`` once, in their order;
    the configured setting, when the plan holds it, moves to the end, so the
    server the sweep leaves running is the configured one and restoring it
    costs no restart.
    """
    configured = step(speculative, k)
    if not restart:
        return {"plan": [configured], "configured": configured}
    plan = [step(False, None)] if baseline else []
    for value in k_values or []:
        entry = step(True, value)
        if entry not in plan:
            plan.append(entry)
    if configured in plan:
        plan.remove(configured)
        plan.append(configured)
    return {"plan": plan, "configured": configured}


def drafts_as_planned(step, spec):
    """Whether the server measured for ``step`` drafts as the step says.

    ``spec`` is vllm_bench's spec-decode window (present, drafts,
    draft_tokens): without the draft the server exports no spec-decode
    counters; with it, it drafted and every draft proposed k tokens. A
    setting given as an extra var (-e) overrides the sweep's, and this is
    how the benchmark notices.
    """
    spec = spec or {}
    if not step.get("speculative"):
        return not spec.get("present")
    drafts = int(spec.get("drafts") or 0)
    return drafts > 0 and spec.get("draft_tokens") == drafts * step.get("k")


def node_memory(reads, head):
    """[{host, role, meminfo}] of each node whose /proc/meminfo was read.

    ``reads`` are the results of the playbook's slurp loop (each with
    ``item``, the host, and ``content``, base64, when the read worked); a node
    that could not be read is left out, and bench_report reports the nodes it
    has.
    """
    nodes = []
    for read in reads or []:
        if not isinstance(read, dict) or read.get("content") is None:
            continue
        host = read.get("item")
        nodes.append({"host": host, "role": "head" if host == head else "worker",
                      "meminfo": base64.b64decode(read["content"]).decode("utf-8")})
    return nodes
