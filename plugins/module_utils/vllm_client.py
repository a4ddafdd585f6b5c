# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Talk to a vLLM OpenAI-compatible server with the standard library only."""

from __future__ import annotations

import json
import time
import urllib.request

from ansible_collections.laguna.spark.plugins.module_utils import prometheus

# A block of ordinary Python the draft model can predict well; repeated with
# a counter so the prompt is not one line over and over.
_CODE_UNIT = '''
def merge_intervals_{n}(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged

'''


def get_text(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


def post_json(url, payload, timeout=300):
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode("utf-8"),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def first_model(base_url, timeout=30):
    models = json.loads(get_text(base_url.rstrip("/") + "/v1/models", timeout))
    return models["data"][0]["id"]


def metric_sums(base_url, timeout=30):
    return prometheus.sums(get_text(base_url.rstrip("/") + "/metrics", timeout))


def code_prompt(target_tokens, chars_per_token=3.5):
    """A code-review prompt of about ``target_tokens`` tokens."""
    head = "Review the following Python module, then rewrite it as one documented, tested function:\n\n"
    body, size = [], 0
    budget = int(target_tokens * chars_per_token) - len(head)
    while size < budget:
        body.append(_CODE_UNIT.format(n=len(body)))
        size += len(body[-1])
    return head + "".join(body)


def stream_chat(base_url, payload, timeout=600, clock=time.monotonic):
    """POST a streaming chat completion; yield ``(time, chunk)`` per SSE event."""
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(dict(payload, stream=True)).encode("utf-8"),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            yield clock(), json.loads(data)


def measure_stream(events, started):
    """TTFT and decode rate from ``(time, chunk)`` events of one stream.

    decode tok/s = (completion_tokens - 1) / (t_last - t_first), the first
    token being the prefill's; completion_tokens comes from the usage chunk.
    """
    t_first = t_last = None
    usage = None
    text = []
    for at, chunk in events:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                text.append(piece)
                t_first = at if t_first is None else t_first
                t_last = at
    completion = (usage or {}).get("completion_tokens")
    result = {
        "ttft_s": (t_first - started) if t_first is not None else None,
        "completion_tokens": completion,
        "prompt_tokens": (usage or {}).get("prompt_tokens"),
        "decode_s": (t_last - t_first) if t_first is not None else None,
        "decode_tok_s": None,
        "text": "".join(text),
    }
    if completion and completion > 1 and t_last > t_first:
        result["decode_tok_s"] = (completion - 1) / (t_last - t_first)
    return result
