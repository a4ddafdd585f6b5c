#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_spec_decode_info
short_description: Read speculative-decoding counters from a vLLM server's /metrics
version_added: "0.1.0"
description:
  - Fetches C(/metrics) and sums C(vllm:spec_decode_num_drafts_total),
    C(vllm:spec_decode_num_draft_tokens_total) and
    C(vllm:spec_decode_num_accepted_tokens_total) over all label sets, and
    C(vllm:spec_decode_num_accepted_tokens_per_pos_total) per C(position) label.
  - With O(fail_on_zero_acceptance), fails when drafts were proposed but none
    was accepted, the sign of a draft that does not match the target.
  - vLLM does not guard C(/metrics) with O(api_key) itself; the key matters to
    a proxy in front that does, whose 401 fails the module naming the fix.
  - Read-only; supports check mode.
options:
  timeout:
    description: HTTP timeout in seconds.
    type: int
    default: 30
  fail_on_zero_acceptance:
    description: Fail when no draft token was accepted, or none proposed.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Only reads C(/metrics); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.vllm_server, laguna.spark.vllm_server.any_host]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Acceptance after warm-up
  laguna.spark.vllm_spec_decode_info:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_serve_api_key | default('') }}"
    fail_on_zero_acceptance: true
  no_log: true  # the task carries the API key
"""

RETURN = r"""
present:
  description: Whether the server exports spec-decode counters at all.
  returned: always
  type: bool
draft_tokens:
  description: Draft tokens proposed since start.
  returned: always
  type: int
  sample: 6000
accepted_tokens:
  description: Draft tokens accepted since start.
  returned: always
  type: int
  sample: 4500
drafts:
  description: Draft rounds since start.
  returned: always
  type: int
acceptance_rate:
  description: accepted_tokens / draft_tokens, null before any draft.
  returned: always
  type: float
mean_acceptance_length:
  description: 1 + accepted_tokens / drafts (tokens per target step), null before any draft.
  returned: always
  type: float
accepted_tokens_per_position:
  description:
    - Accepted draft tokens at each draft position (0 to k-1), from
      C(vllm:spec_decode_num_accepted_tokens_per_pos_total) summed over engines;
      empty when the server does not export it.
  returned: always
  type: list
  elements: int
acceptance_per_position:
  description: accepted_tokens_per_position / drafts, position by position; empty before any draft.
  returned: always
  type: list
  elements: float
"""

from ansible_collections.laguna.spark.plugins.module_utils import prometheus, vllm_client
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        vllm_client.server_options(),
        timeout=dict(type="int", default=30),
        fail_on_zero_acceptance=dict(type="bool", default=False),
    ))
    url = module.params["url"]
    try:
        totals = vllm_client.metric_sums(url, module.params["timeout"], api_key=module.params["api_key"])
    except Exception as exc:  # urllib raises several unrelated types
        module.fail_json(msg="Could not read %s/metrics: %s" % (url.rstrip("/"), exc))
    result = dict(changed=False, **prometheus.spec_decode(totals))
    if module.params["fail_on_zero_acceptance"]:
        if not result["present"] or result["draft_tokens"] == 0:
            module.fail_json(
                msg="No speculative draft tokens were proposed (spec_decode counters %s): "
                    "the server is not running with the DFlash --speculative-config."
                    % ("absent" if not result["present"] else "at 0"), **result)
        if result["accepted_tokens"] == 0:
            module.fail_json(
                msg="Spec-decode acceptance is 0 (0 of %d draft tokens accepted): the draft "
                    "does not match the target precision/model. Stage the W4A16 DFlash draft "
                    "made for this checkpoint." % result["draft_tokens"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
