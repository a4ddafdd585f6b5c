# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The collection's one reader of the Prometheus text exposition (vLLM's /metrics).

Modules run on the nodes' system Python, where prometheus_client is not
guaranteed, so this reads the (simple, line-based) text format itself:
samples() parses it; sums() (vllm_spec_decode_info, the verify step) and
bench_stats.spec_counters() (the benchmark) are built on it.  Checked against
the exposition of vLLM 0.25.1's own registry by tests/conformance/test_vllm_metrics.py.
"""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

SPEC_DECODE = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
# vLLM 0.25.1 declares the counter vllm:spec_decode_num_accepted_tokens_per_pos
# with a "position" label (one sample per engine and position); the exposition
# appends _total.
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def samples(text):
    """[(name, {label: value}, value)] of a Prometheus text exposition, in order.

    Comments, lines that are not samples and NaN samples are left out.
    """
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group("value"))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL.finditer(match.group("labels") or "")}
        found.append((match.group("name"), labels, value))
    return found


def label_position(labels):
    """The draft position (int) in a per-position acceptance sample's labels, or None."""
    value = labels.get("position", "")
    return int(value) if value.isdecimal() else None


def position_key(position):
    """The key sums() files a per-position acceptance sample under."""
    return '%s{position="%d"}' % (ACCEPTED_PER_POS, position)


def sums(text):
    """Map each metric name to the sum of its samples over all label sets.

    The per-position acceptance counter is also summed per position, under
    position_key(n).
    """
    totals = {}
    for name, labels, value in samples(text):
        totals[name] = totals.get(name, 0.0) + value
        if name == ACCEPTED_PER_POS:
            pos = label_position(labels)
            if pos is not None:
                key = position_key(pos)
                totals[key] = totals.get(key, 0.0) + value
    return totals


def _per_position(totals):
    accepted, position = [], 0
    while position_key(position) in totals:
        accepted.append(totals[position_key(position)])
        position += 1
    return accepted


def spec_decode(totals):
    """Spec-decode counters and the derived rates (None where undefined)."""
    found = {key: totals.get(name) for key, name in SPEC_DECODE.items()}
    draft = found["draft_tokens"] or 0.0
    drafts = found["drafts"] or 0.0
    accepted = found["accepted_tokens"] or 0.0
    per_position = _per_position(totals)
    return {
        "present": found["draft_tokens"] is not None and found["accepted_tokens"] is not None,
        "accepted_tokens_per_position": [int(n) for n in per_position],
        "acceptance_per_position": [n / drafts for n in per_position] if drafts else [],
        "drafts": int(drafts),
        "draft_tokens": int(draft),
        "accepted_tokens": int(accepted),
        "acceptance_rate": (accepted / draft) if draft else None,
        "mean_acceptance_length": (1.0 + accepted / drafts) if drafts else None,
    }


def delta(before, after):
    """Spec-decode figures for what happened between two readings."""
    return spec_decode({
        name: after.get(name, 0.0) - before.get(name, 0.0)
        for name in list(SPEC_DECODE.values()) + [k for k in after if k.startswith(ACCEPTED_PER_POS + "{")]
        if name in after
    })
