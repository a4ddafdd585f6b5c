# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Sum samples of a Prometheus text exposition and read vLLM spec-decode counters.

Modules run on the nodes' system Python, where prometheus_client is not
guaranteed, so this reads the (simple, line-based) text format itself.
"""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)

SPEC_DECODE = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def sums(text):
    """Map each metric name to the sum of its samples over all label sets."""
    totals = {}
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
        name = match.group("name")
        totals[name] = totals.get(name, 0.0) + value
    return totals


def spec_decode(totals):
    """Spec-decode counters and the derived rates (None where undefined)."""
    found = {key: totals.get(name) for key, name in SPEC_DECODE.items()}
    draft = found["draft_tokens"] or 0.0
    drafts = found["drafts"] or 0.0
    accepted = found["accepted_tokens"] or 0.0
    return {
        "present": found["draft_tokens"] is not None and found["accepted_tokens"] is not None,
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
        for name in SPEC_DECODE.values() if name in after
    })
