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
  - Read-only.
options:
  timeout:
    description: Seconds to wait for the answer.
    type: int
    default: 30
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.vllm_server,
                                  laguna.spark.vllm_server.one_get]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Is the running server answering?
  laguna.spark.vllm_health:
    url: http://127.0.0.1:8000
    timeout: 30
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
"""

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health


def main():
    module = vllm_health.server_module(default_timeout=30)
    state, status, seconds, detail = vllm_health.probe(
        module.params["url"].rstrip("/") + "/health", module.params["timeout"], api_key=module.params["api_key"])
    module.exit_json(changed=False, state=state, status=status, seconds=seconds, detail=detail)


if __name__ == "__main__":
    main()
