#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench
short_description: Single-stream decode benchmark of a vLLM OpenAI endpoint
version_added: "0.1.0"
description:
  - Streams chat completions of a code prompt of about O(prompt_tokens)
    tokens at temperature 0 and measures time to first token and decode
    speed, C((completion_tokens - 1) / (t_last - t_first)).
  - Reads the spec-decode counters of C(/metrics) before and after, and
    reports the acceptance of the measured requests alone.
  - Sends requests but changes nothing; reports C(changed=false). Skipped in check mode.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:8000
  model:
    description: Served model name; the first of C(/v1/models) when unset.
    type: str
  prompt_tokens:
    description: Approximate prompt length in tokens.
    type: int
    default: 2048
  max_tokens:
    description: Tokens to generate per request.
    type: int
    default: 512
  runs:
    description: Measured requests; results are reported per run and as means.
    type: int
    default: 3
  warmup:
    description: Unmeasured requests sent first.
    type: int
    default: 1
  timeout:
    description: HTTP timeout per request, in seconds.
    type: int
    default: 900
author:
  - laguna-spark developers
"""

EXAMPLES = r"""
- name: Benchmark
  laguna.spark.vllm_bench:
    url: http://127.0.0.1:8000
    prompt_tokens: 2048
    max_tokens: 512
  register: bench
"""

RETURN = r"""
decode_tok_s:
  description: Mean decode speed over the runs.
  returned: success
  type: float
  sample: 60.9
ttft_s:
  description: Mean time to first token.
  returned: success
  type: float
acceptance_rate:
  description: Accepted / proposed draft tokens during the runs; null without spec decode.
  returned: success
  type: float
mean_acceptance_length:
  description: Tokens per target step during the runs; null without spec decode.
  returned: success
  type: float
runs:
  description: Per-run figures (ttft_s, decode_tok_s, completion_tokens, prompt_tokens, decode_s).
  returned: success
  type: list
  elements: dict
model:
  description: The model benchmarked.
  returned: success
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import prometheus, vllm_client


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            model=dict(type="str"),
            prompt_tokens=dict(type="int", default=2048),
            max_tokens=dict(type="int", default=512),
            runs=dict(type="int", default=3),
            warmup=dict(type="int", default=1),
            timeout=dict(type="int", default=900),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="benchmark not run in check mode")
    url = params["url"]
    try:
        model = params["model"] or vllm_client.first_model(url)
        payload = {
            "model": model, "temperature": 0, "max_tokens": params["max_tokens"],
            "messages": [{"role": "user", "content": vllm_client.code_prompt(params["prompt_tokens"])}],
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        for _ in range(params["warmup"]):
            list(vllm_client.stream_chat(url, payload, params["timeout"]))
        before = vllm_client.metric_sums(url)
        runs = []
        for _ in range(params["runs"]):
            started = time.monotonic()
            run = vllm_client.measure_stream(
                vllm_client.stream_chat(url, payload, params["timeout"]), started)
            run.pop("text")
            runs.append(run)
        after = vllm_client.metric_sums(url)
    except Exception as exc:  # urllib raises several unrelated types
        module.fail_json(msg="Benchmark against %s failed: %s" % (url, exc))
    spec = prometheus.delta(before, after)
    module.exit_json(
        changed=False, model=model, runs=runs,
        prompt_tokens=_mean([r["prompt_tokens"] for r in runs]),
        completion_tokens=_mean([r["completion_tokens"] for r in runs]),
        decode_tok_s=_mean([r["decode_tok_s"] for r in runs]),
        ttft_s=_mean([r["ttft_s"] for r in runs]),
        acceptance_rate=spec["acceptance_rate"],
        mean_acceptance_length=spec["mean_acceptance_length"],
        draft_tokens=spec["draft_tokens"], accepted_tokens=spec["accepted_tokens"],
    )


if __name__ == "__main__":
    main()
