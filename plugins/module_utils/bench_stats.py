# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Arithmetic of the benchmark: medians and spreads, spec-decode windows, memory.

Everything here is a pure function of its inputs (no I/O), so the figures the
benchmark reports can be checked against known inputs.  /metrics is read by
prometheus.samples(), the vLLM log by vllm_log.report().
"""

from __future__ import annotations

import hashlib
import math

from ansible_collections.laguna.spark.plugins.module_utils import prometheus

GIB = float(1 << 30)


def decode_rate(completion_tokens, t_first, t_last):
    """The recipe's decode tok/s: (completion_tokens - 1) / (t_last_token - t_first_token).

    None when it is undefined (fewer than two tokens, or no time between them).
    """
    if completion_tokens is None or t_first is None or t_last is None:
        return None
    if completion_tokens < 2 or t_last <= t_first:
        return None
    return (completion_tokens - 1) / float(t_last - t_first)


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    if len(values) % 2:
        return float(values[mid])
    return (values[mid - 1] + values[mid]) / 2.0


def summary(values):
    """Median and spread of repeated measurements (None values are left out)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return {"n": 0, "median": None, "min": None, "max": None, "spread": None,
                "stdev": None, "relative_spread": None, "values": []}
    mid = median(kept)
    mean = sum(kept) / len(kept)
    stdev = math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1)) if len(kept) > 1 else 0.0
    spread = max(kept) - min(kept)
    return {"n": len(kept), "median": mid, "min": min(kept), "max": max(kept), "spread": spread,
            "stdev": stdev, "relative_spread": (spread / mid) if mid else None, "values": kept}


def spec_counters(text):
    """The spec-decode counters of one /metrics reading (read by prometheus.samples), summed over engines.

    per_position maps the draft position (0-based) to accepted tokens there.
    """
    counters = {"drafts": None, "draft_tokens": None, "accepted_tokens": None, "per_position": {}}
    keys = {name: key for key, name in prometheus.SPEC_DECODE.items()}
    for name, labels, value in prometheus.samples(text):
        if name in keys:
            key = keys[name]
            counters[key] = (counters[key] or 0.0) + value
        elif name == prometheus.ACCEPTED_PER_POS:
            pos = prometheus.label_position(labels)
            if pos is not None:
                counters["per_position"][pos] = counters["per_position"].get(pos, 0.0) + value
    return counters


def spec_window(before, after):
    """Spec-decode figures of what happened between two readings of spec_counters().

    acceptance_rate = accepted / draft tokens; per_position[i] = accepted at
    position i / drafts; accepted_per_draft = accepted / drafts (the recipe's
    "tokens/step", 3.73 at 62.2% and k=6); mean_acceptance_length = 1 +
    accepted / drafts (vLLM's convention, which counts the bonus token).
    """
    present = after.get("draft_tokens") is not None and after.get("accepted_tokens") is not None
    result = {"present": present, "reset": False, "drafts": None, "draft_tokens": None,
              "accepted_tokens": None, "acceptance_rate": None, "per_position": [],
              "per_position_accepted": [], "accepted_per_draft": None,
              "mean_acceptance_length": None}
    if not present:
        return result

    def delta(key):
        return (after.get(key) or 0.0) - (before.get(key) or 0.0)

    drafts, drafted, accepted = delta("drafts"), delta("draft_tokens"), delta("accepted_tokens")
    if drafts < 0 or drafted < 0 or accepted < 0:
        # The counters went down: the server restarted inside the window.
        result["reset"] = True
        return result
    positions = sorted(after.get("per_position") or {})
    per_pos = [(after["per_position"][p] - (before.get("per_position") or {}).get(p, 0.0)) for p in positions]
    result.update(
        drafts=int(drafts), draft_tokens=int(drafted), accepted_tokens=int(accepted),
        acceptance_rate=(accepted / drafted) if drafted else None,
        per_position_accepted=[int(v) for v in per_pos],
        per_position=[(v / drafts) for v in per_pos] if drafts else [],
        accepted_per_draft=(accepted / drafts) if drafts else None,
        mean_acceptance_length=(1.0 + accepted / drafts) if drafts else None,
    )
    return result


def compare_tokens(reference, candidate):
    """Whether two greedy outputs are token-identical, and where they part."""
    reference, candidate = list(reference or []), list(candidate or [])
    first = None
    for index, (a, b) in enumerate(zip(reference, candidate)):
        if a != b:
            first = index
            break
    if first is None and len(reference) != len(candidate):
        first = min(len(reference), len(candidate))
    return {"identical": first is None and bool(reference), "first_difference": first,
            "reference_tokens": len(reference), "tokens": len(candidate)}


def token_digest(token_ids):
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids or []).encode("ascii")).hexdigest()[:16]


def meminfo(text):
    """Total, available and used memory from /proc/meminfo (used = total - available, as free(1) counts)."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts and parts[0].isdigit():
            factor = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = int(parts[0]) * factor
    total = values.get("MemTotal")
    available = values.get("MemAvailable")
    if available is None and total is not None:
        available = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    if total is None:
        return {"total_bytes": None, "available_bytes": None, "used_bytes": None,
                "total_gib": None, "used_gib": None, "available_gib": None}
    used = total - available
    return {"total_bytes": total, "available_bytes": available, "used_bytes": used,
            "total_gib": total / GIB, "used_gib": used / GIB, "available_gib": available / GIB}


def ratio(measured, reference):
    if measured is None or not reference:
        return None
    return measured / float(reference)
