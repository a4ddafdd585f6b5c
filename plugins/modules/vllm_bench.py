#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench
short_description: Single-stream decode, TTFT and greedy-output measurements of a vLLM OpenAI endpoint
version_added: "0.1.0"
description:
  - "O(measure=decode): sends O(warmup) unmeasured requests, then O(runs)
    streamed chat completions of a code prompt of exactly O(prompt_tokens)
    tokens at temperature 0 with C(stream_options.include_usage), and reports
    decode tok/s by the recipe's formula
    C((completion_tokens - 1) / (t_last_token - t_first_token)) per run, with
    median and spread."
  - "With O(measure=decode), also reads the spec-decode counters of
    C(/metrics) right after the warm-up and after the last run, and reports
    the acceptance rate, the acceptance per draft position
    (C(vllm:spec_decode_num_accepted_tokens_per_pos) by its C(position)
    label) and the tokens per step of the measured requests alone."
  - "O(measure=ttft): time to first token at a prompt of exactly
    O(prompt_tokens) tokens, each run with a prompt of its own so that no
    prefix is cached. A length that does not fit the served model's context
    (with O(max_tokens)) is skipped and reported so."
  - "O(measure=greedy): the token ids of a temperature-0 completion of each of
    O(prompts) (vLLM's C(return_token_ids)), to compare outputs with and
    without the draft."
  - Prompts of an exact token count are built with the server's own
    tokenizer through C(/tokenize) and C(/detokenize).
  - Sends requests but changes nothing; reports C(changed=false). Skipped in check mode.
  - O(api_key) goes with every request, the guarded /v1 paths' and the others'.
    A server that answers 401 (it serves with an API key that O(api_key) does
    not match) fails the module with a message that names the fix.
options:
  model:
    description: Served model name; the first of C(/v1/models) when unset.
    type: str
  measure:
    description: What to measure.
    type: str
    choices: [decode, ttft, greedy]
    default: decode
  prompt_tokens:
    description: Prompt length in tokens, as the served model's tokenizer counts the chat request.
    type: int
    default: 2048
  exact_prompt:
    description:
      - Build the prompt to the exact token count through C(/tokenize).
      - When false, the prompt is sized by characters (about 3.5 per token).
    type: bool
    default: true
  max_tokens:
    description: Tokens to generate per request (C(ignore_eos) is set, so every request generates them all).
    type: int
    default: 512
  runs:
    description: Measured requests.
    type: int
    default: 3
  warmup:
    description: Unmeasured requests sent first (O(measure=decode)).
    type: int
    default: 1
  prompts:
    description: Prompts of O(measure=greedy).
    type: list
    elements: str
    default: []
  timeout:
    description: HTTP timeout per request, in seconds.
    type: int
    default: 900
attributes:
  check_mode:
    support: full
    description: Nothing is sent in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.vllm_server, laguna.spark.vllm_server.any_host]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Decode speed at a 2048-token code prompt
  laguna.spark.vllm_bench:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_serve_api_key | default('') }}"
    prompt_tokens: 2048
    max_tokens: 512
    runs: 5
    warmup: 2
  no_log: true  # the task carries the API key
  register: bench

- name: TTFT at 32K
  laguna.spark.vllm_bench:
    measure: ttft
    prompt_tokens: 32768
    max_tokens: 8
    runs: 1

- name: Greedy outputs to compare across configurations
  laguna.spark.vllm_bench:
    measure: greedy
    max_tokens: 128
    prompts:
      - Write a Python function that parses a CSV file into dicts.
"""

RETURN = r"""
model:
  description: The model benchmarked.
  returned: success
  type: str
server_version:
  description: What C(/version) says, null when the server has no such endpoint.
  returned: success
  type: str
  sample: 0.25.1
measure:
  description: What was measured.
  returned: success
  type: str
prompt_tokens:
  description: Prompt tokens the server counted (usage), median over the runs.
  returned: success and not skipped
  type: float
target_prompt_tokens:
  description: The requested prompt length, O(prompt_tokens).
  returned: when measure is decode or ttft
  type: int
prompt_exact:
  description: Whether every prompt had exactly the requested token count.
  returned: when measure is decode or ttft
  type: bool
completion_tokens:
  description: Completion tokens per run (median).
  returned: when measure is decode
  type: float
decode_tok_s:
  description: Median decode speed over the runs.
  returned: when measure is decode
  type: float
  sample: 60.9
decode_tok_s_stats:
  description: Median, min, max, spread, stdev, relative_spread, n and values of the decode speed.
  returned: when measure is decode
  type: dict
ttft_s:
  description: Median time to first token.
  returned: when measure is decode or ttft
  type: float
ttft_s_stats:
  description: The figures of RV(decode_tok_s_stats), of the time to first token.
  returned: when measure is decode or ttft
  type: dict
spec:
  description:
    - Spec-decode figures of the measured runs (C(bench_stats.spec_window)) - present, reset,
      drafts, draft_tokens, accepted_tokens, acceptance_rate, per_position,
      per_position_accepted, accepted_per_draft, mean_acceptance_length.
    - All null without a speculative config.
  returned: when measure is decode
  type: dict
acceptance_rate:
  description: Accepted / proposed draft tokens during the runs; null without spec decode.
  returned: when measure is decode
  type: float
mean_acceptance_length:
  description: 1 + accepted / drafts during the runs (vLLM's convention); null without spec decode.
  returned: when measure is decode
  type: float
draft_tokens:
  description: Draft tokens proposed during the runs.
  returned: when measure is decode
  type: int
accepted_tokens:
  description: Draft tokens accepted during the runs.
  returned: when measure is decode
  type: int
runs:
  description: Per-run figures (ttft_s, decode_tok_s, completion_tokens, prompt_tokens, decode_s).
  returned: when measure is decode or ttft
  type: list
  elements: dict
outputs:
  description: Per prompt of O(prompts) - prompt, token_ids, completion_tokens, text (first 200 characters).
  returned: when measure is greedy
  type: list
  elements: dict
skipped:
  description: True when there was nothing to measure (check mode, or a prompt longer than the context).
  returned: when skipped
  type: bool
msg:
  description: Why it was skipped.
  returned: when skipped
  type: str
"""

import time

from ansible_collections.laguna.spark.plugins.module_utils import bench_stats, vllm_client
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def _prompt(params, url, model, salt):
    if params["exact_prompt"]:
        return vllm_client.exact_prompt(url, model, params["prompt_tokens"], salt=salt,
                                        timeout=params["timeout"], api_key=params["api_key"])
    content = salt + vllm_client.code_prompt(params["prompt_tokens"])
    return {"content": content, "prompt_tokens": None, "exact": False, "attempts": 0}


def _payload(model, content, max_tokens):
    return {"model": model, "temperature": 0, "max_tokens": max_tokens,
            "messages": vllm_client.user(content),
            "stream_options": {"include_usage": True}, "ignore_eos": True}


def _timed(url, payload, timeout, api_key=None):
    started = time.monotonic()
    run = vllm_client.measure_stream(vllm_client.stream_chat(url, payload, timeout, api_key=api_key), started)
    run.pop("text")
    run.pop("token_ids")
    return run


def decode(params, url, model):
    stamp = "%x" % int(time.time() * 1000)
    for index in range(params["warmup"]):
        prompt = _prompt(params, url, model, "Warm-up %d (%s).\n" % (index, stamp))
        _timed(url, _payload(model, prompt["content"], params["max_tokens"]), params["timeout"], params["api_key"])
    prompts = [_prompt(params, url, model, "Run %d (%s).\n" % (index, stamp)) for index in range(params["runs"])]
    before = vllm_client.spec_counters(url, api_key=params["api_key"])
    runs = [_timed(url, _payload(model, p["content"], params["max_tokens"]), params["timeout"], params["api_key"])
            for p in prompts]
    after = vllm_client.spec_counters(url, api_key=params["api_key"])
    spec = bench_stats.spec_window(before, after)
    rate = bench_stats.summary([r["decode_tok_s"] for r in runs])
    ttft = bench_stats.summary([r["ttft_s"] for r in runs])
    return dict(
        runs=runs, target_prompt_tokens=params["prompt_tokens"],
        prompt_exact=all(p["exact"] for p in prompts),
        prompt_tokens=bench_stats.median([r["prompt_tokens"] for r in runs]),
        completion_tokens=bench_stats.median([r["completion_tokens"] for r in runs]),
        decode_tok_s=rate["median"], decode_tok_s_stats=rate,
        ttft_s=ttft["median"], ttft_s_stats=ttft, spec=spec,
        acceptance_rate=spec["acceptance_rate"], mean_acceptance_length=spec["mean_acceptance_length"],
        draft_tokens=spec["draft_tokens"], accepted_tokens=spec["accepted_tokens"],
    )


def ttft(params, url, model, max_model_len):
    needed = params["prompt_tokens"] + params["max_tokens"]
    if max_model_len and needed > max_model_len:
        return dict(skipped=True, target_prompt_tokens=params["prompt_tokens"], prompt_exact=False,
                    msg="%d prompt + %d completion tokens exceed the served context of %d tokens"
                        % (params["prompt_tokens"], params["max_tokens"], max_model_len))
    stamp = "%x" % int(time.time() * 1000)
    runs, exact = [], True
    for index in range(params["runs"]):
        prompt = _prompt(params, url, model, "TTFT %d at %d tokens (%s).\n" % (index, params["prompt_tokens"], stamp))
        exact = exact and prompt["exact"]
        runs.append(_timed(url, _payload(model, prompt["content"], params["max_tokens"]), params["timeout"],
                           params["api_key"]))
    stats = bench_stats.summary([r["ttft_s"] for r in runs])
    return dict(runs=runs, target_prompt_tokens=params["prompt_tokens"], prompt_exact=exact,
                prompt_tokens=bench_stats.median([r["prompt_tokens"] for r in runs]),
                ttft_s=stats["median"], ttft_s_stats=stats)


def greedy(params, url, model):
    outputs = []
    for prompt in params["prompts"]:
        out = vllm_client.greedy_tokens(url, model, prompt, params["max_tokens"], params["timeout"],
                                        api_key=params["api_key"])
        if out["token_ids"] is None:
            raise vllm_client.ServerError("the server returned no token_ids (return_token_ids)")
        outputs.append(dict(prompt=prompt, token_ids=out["token_ids"], completion_tokens=out["completion_tokens"],
                            text=out["text"][:200]))
    return dict(outputs=outputs)


def main():
    module = new_module(dict(
        vllm_client.server_options(),
        model=dict(type="str"),
        measure=dict(type="str", default="decode", choices=["decode", "ttft", "greedy"]),
        prompt_tokens=dict(type="int", default=2048, no_log=False),
        exact_prompt=dict(type="bool", default=True),
        max_tokens=dict(type="int", default=512, no_log=False),
        runs=dict(type="int", default=3),
        warmup=dict(type="int", default=1),
        prompts=dict(type="list", elements="str", default=[]),
        timeout=dict(type="int", default=900),
    ))
    params = module.params
    for key, low in (("prompt_tokens", 1), ("max_tokens", 1), ("runs", 1), ("warmup", 0), ("timeout", 1)):
        if params[key] < low:
            module.fail_json(msg="%s must be at least %d, not %d" % (key, low, params[key]))
    if params["measure"] == "greedy" and not params["prompts"]:
        module.fail_json(msg="measure=greedy needs prompts")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="benchmark not run in check mode")
    url = params["url"].rstrip("/")
    try:
        info = vllm_client.model_info(url, model=params["model"], api_key=params["api_key"])
        model = info["id"]
        common = dict(changed=False, model=model, measure=params["measure"],
                      server_version=vllm_client.server_version(url, api_key=params["api_key"]))
        if params["measure"] == "decode":
            result = decode(params, url, model)
        elif params["measure"] == "ttft":
            result = ttft(params, url, model, info.get("max_model_len"))
        else:
            result = greedy(params, url, model)
    except Exception as exc:  # URL, HTTP, JSON and server errors alike
        module.fail_json(msg="Benchmark (%s) against %s failed: %s" % (params["measure"], url, exc))
    common.update(result)
    module.exit_json(**common)


if __name__ == "__main__":
    main()
