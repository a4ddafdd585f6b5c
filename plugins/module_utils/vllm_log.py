# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The vLLM 0.25.1 log lines the collection reads, and parsers for them.

vLLM writes (format strings in its source, checked by tests/conformance):
  v1/core/kv_cache_utils.py   "GPU KV cache size: %s tokens"               (f"{n:,}")
                              "Maximum concurrency for %s tokens per request: %.2fx"
  .../compressed_tensors_wNa16.py  "Using %s for CompressedTensorsWNA16"   (kernel class name)
  v1/executor/ray_utils.py    "Waiting for creating a placement group of specs for %d seconds. ..."
each behind vLLM's prefix "INFO 12-03 06:43:10 [kv_cache_utils.py:2146] ",
and, read from the journal, behind journald's "Dec 03 06:43:10 host vllm[123]: ".
Only the message part is matched, anywhere in the line.

This is the collection's one reader of vLLM's log: the benchmark playbook keeps
the journal lines that ANY finds (its select('search', ...) pattern, as Ansible
templates the string, is ANY; tests/unit/test_vllm_log.py holds them equal), and
bench_report reads them with report().
"""

from __future__ import annotations

import re

KV_CACHE_TOKENS = re.compile(r"GPU KV cache size: (?P<tokens>\d{1,3}(?:,\d{3})*|\d+) tokens")
MAX_CONCURRENCY = re.compile(
    r"Maximum concurrency for (?P<tokens>\d{1,3}(?:,\d{3})*|\d+) tokens per request: (?P<x>\d+\.\d+)x"
)
LINEAR_KERNEL = re.compile(r"Using (?P<kernel>\w+Kernel) for (?P<scheme>\w+)")

# For a select('search', ...) over journal lines: any of the three.
ANY = r"GPU KV cache size: |Maximum concurrency for \S+ tokens per request: |Using \w+Kernel for \w+"

# vllm/v1/executor/ray_utils.py, logged every 10 s, 20 s, 40 s... while Ray
# cannot place the engine's bundles (too few GPUs in the cluster: a worker
# raylet is down). Only the start of the message is read.
PLACEMENT_GROUP_WAIT = "Waiting for creating a placement group"


def _int(text):
    return int(text.replace(",", ""))


def parse_line(line):
    """{"kv_cache_tokens": int} / {"max_concurrency": float, "max_concurrency_tokens": int} /
    {"kernel": str, "scheme": str}, or None for any other line."""
    match = KV_CACHE_TOKENS.search(line)
    if match:
        return {"kv_cache_tokens": _int(match.group("tokens"))}
    match = MAX_CONCURRENCY.search(line)
    if match:
        return {"max_concurrency": float(match.group("x")), "max_concurrency_tokens": _int(match.group("tokens"))}
    match = LINEAR_KERNEL.search(line)
    if match:
        return {"kernel": match.group("kernel"), "scheme": match.group("scheme")}
    return None


def waits_for_placement_group(lines):
    """Whether vLLM logged that it waits for Ray to place its engine (PLACEMENT_GROUP_WAIT)."""
    return any(PLACEMENT_GROUP_WAIT in (line or "") for line in lines or [])


def parse(lines):
    """What a vLLM log says about the KV pool and the linear kernels (the last line of each counts).

    kernels maps a quantization scheme (CompressedTensorsWNA16, ...) to the kernel
    class vLLM chose for it.
    """
    result = {"kv_cache_tokens": None, "max_concurrency": None, "max_concurrency_tokens": None,
              "kernels": {}}
    for line in lines or []:
        found = parse_line(line)
        if not found:
            continue
        if "scheme" in found:
            result["kernels"][found["scheme"]] = found["kernel"]
        else:
            result.update(found)
    return result


def report(lines, keep=12):
    """parse() as the benchmark reports it (bench_report): kernels as a list of
    {"kernel", "scheme"} sorted by scheme, and "lines", the last `keep` lines
    (right-stripped) that parse_line() read."""
    said = [line.rstrip() for line in lines or [] if parse_line(line)]
    result = parse(said)
    result["kernels"] = [{"kernel": kernel, "scheme": scheme} for scheme, kernel in sorted(result["kernels"].items())]
    result["lines"] = said[-keep:]
    return result
