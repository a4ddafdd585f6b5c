# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that talk to a running vLLM server over HTTP."""

    # The server's address and API key (module_utils/vllm_client.server_options()
    # declares them); what a 401 does is each module's own, in its description.
    DOCUMENTATION = r"""
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:8000
  api_key:
    description:
      - The server's API key (vLLM's C(--api-key) or C(VLLM_API_KEY); the collection's
        C(vllm_serve_api_key)), sent as a Bearer token, as vLLM wants it on its guarded
        /v1 paths; never logged.
      - Unset or empty, no C(Authorization) header is sent.
    type: str
"""

    # Modules that need nothing on the host they run on but a route to the
    # server.
    ANY_HOST = r"""
options: {}
attributes:
  platform:
    support: full
    platforms: posix
    description: Any POSIX host that can reach the server.
"""

    # Modules whose only act is one GET request to the server.
    ONE_GET = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Only sends a GET request; the same result in check mode.
"""

    # Modules that run the recipe's smoke test (module_utils/vllm_health.smoke();
    # vllm_health.SMOKE_OPTIONS declares the option).
    SMOKE = r"""
options:
  smoke:
    description:
      - The recipe's smoke test - one chat completion at temperature 0 - and how its answer is judged.
    type: dict
    suboptions:
      model:
        description: The served model name to ask.
        type: str
        required: true
      prompt:
        description: The question (the recipe's C(capital of France? one word)).
        type: str
        required: true
      max_tokens:
        description: The answer's length limit.
        type: int
        default: 8
      expect:
        description: Text the answer must hold (case aside); empty, any non-empty answer passes.
        type: str
        default: ""
      timeout:
        description: Seconds to wait for the answer; unset, the module's own timeout (its description says which).
        type: int
"""
