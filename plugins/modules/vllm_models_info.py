#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_models_info
short_description: Whether a vLLM server lists its models yet, and which
version_added: "0.3.0"
description:
  - Sends one C(GET /v1/models) with a bounded timeout. RV(up) is HTTP 200,
    so the engine is loaded and the API answers (vLLM listens only once it is).
  - A server that does not answer (refused while the weights load, timed
    out, any other status) is an outcome, RV(up=false), not a failure, so a
    task can wait for it with C(until) and the next task can explain why it
    never came up. The module fails only on bad options.
  - C(/v1/models) is guarded by O(api_key); a 401 is RV(up=false), and its
    RV(detail) names the setting to fix.
  - Read-only.
options:
  timeout:
    description: Seconds to wait for the answer.
    type: int
    default: 10
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.vllm_server, laguna.spark.vllm_server.any_host,
                                  laguna.spark.vllm_server.one_get]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
# Wait up to 180 x 10 s; the last attempt ends the loop whatever it finds,
# and the next task acts on RV(up).
- name: Wait for the API to list its models
  laguna.spark.vllm_models_info:
    url: http://127.0.0.1:8000
    api_key: "{{ vllm_serve_api_key }}"
  register: models
  until: models.up or models.attempts > 180
  retries: 180
  delay: 10

- name: The served model is laguna-s-fp8
  ansible.builtin.assert:
    that: models.up and 'laguna-s-fp8' in models.models
"""

RETURN = r"""
up:
  description: Whether the server answered C(/v1/models) with HTTP 200.
  returned: always
  type: bool
  sample: true
status:
  description: The HTTP status; -1 when nothing answered.
  returned: always
  type: int
  sample: 200
models:
  description: The ids of the models the server lists (empty when not RV(up)).
  returned: always
  type: list
  elements: str
  sample: [laguna-s-fp8]
detail:
  description: The HTTP status or the error seen (a 401 names the setting to fix, never the key).
  returned: always
  type: str
  sample: "[Errno 111] Connection refused"
url:
  description: The URL asked.
  returned: always
  type: str
  sample: http://127.0.0.1:8000/v1/models
"""

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health


def main():
    module = vllm_health.server_module(default_timeout=10)
    found = vllm_health.models(module.params["url"], module.params["timeout"], api_key=module.params["api_key"])
    module.exit_json(changed=False, url=module.params["url"].rstrip("/") + "/v1/models", **found)


if __name__ == "__main__":
    main()
