#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Probe a vLLM server's /health and tell hung from down
version_added: "0.2.0"
description:
  - Sends one C(GET /health) with a bounded timeout and classifies the answer.
  - C(healthy) is HTTP 200. C(down) is a refused connection (nothing listens;
    stopped, or still loading the weights, since vLLM listens only once the
    engine is up). C(hung) is a connection that nothing answers within
    O(timeout) (a stopped or wedged process still holds its socket), the only
    state in which a restart helps. Anything else is C(unhealthy).
  - vLLM does not guard C(/health) with O(api_key) itself; the key matters to
    a proxy in front that does. A 401 is C(unhealthy), and its RV(detail) names the fix.
  - With O(smoke), a server whose C(/health) answers also gets the recipe's
    smoke test (one chat completion at temperature 0, the same request and
    judgement as the site run's verification and the fast no-op path's
    check). vLLM's C(/health) and C(/v1/models) answer while its engine is
    wedged (a hung collective); only a generation shows it. No answer
    within O(smoke.timeout) (default O(timeout)) while vLLM's generated-token counter
    (C(vllm:generation_tokens_total)) stands still makes the state C(hung);
    one that moved meanwhile is a busy server, not a hung one.
  - Read-only.
options:
  timeout:
    description: Seconds to wait for the answer to C(GET /health).
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Sends C(GET /health) and, with O(smoke), one chat completion, which changes nothing; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.vllm_server,
                                  laguna.spark.vllm_server.smoke]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Is the running server answering?
  laguna.spark.vllm_health:
    url: http://127.0.0.1:8000
    timeout: 30
  register: health

- name: Is it hung, its engine included?
  laguna.spark.vllm_health:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_serve_api_key }}"
    timeout: 30
    smoke:
      model: laguna-s-2.1
      prompt: capital of France? one word
      expect: Paris
  register: health
"""

RETURN = r"""
state:
  description: One of C(healthy), C(down), C(hung), C(unhealthy).
  returned: always
  type: str
  sample: hung
status:
  description: HTTP status, when there was one.
  returned: always
  type: int
  sample: 200
seconds:
  description: How long the probe took.
  returned: always
  type: float
detail:
  description: The HTTP status or the error seen.
  returned: always
  type: str
  sample: timed out
smoke:
  description: What the smoke test found (with O(smoke) and a C(/health) that answered).
  returned: when O(smoke) is set and C(/health) answered HTTP 200
  type: dict
  contains:
    state:
      description: C(answered), C(wrong), C(failed), C(down), C(hung) or C(busy).
      type: str
      sample: answered
    ok:
      description: Whether the answer holds O(smoke.expect).
      type: bool
    content:
      description: The answer's text (null without one).
      type: str
      sample: Paris
    completion_tokens:
      description: The answer's length in tokens, as the server counts it.
      type: int
      sample: 2
    seconds:
      description: How long the request took.
      type: float
    message:
      description: What was found, in one sentence (the failure message when O(smoke) did not pass).
      type: str
      sample: "2 tokens: Paris"
"""

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health


def main():
    module = vllm_health.server_module(default_timeout=30, smoke=vllm_health.SMOKE_OPTIONS)
    p = module.params
    try:
        result = vllm_health.check(p["url"], p["timeout"], api_key=p["api_key"], smoke_options=p["smoke"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
