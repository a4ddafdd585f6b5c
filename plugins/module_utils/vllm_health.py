# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Tell a hung vLLM from one that is down or still starting.

vLLM's API server listens only once the engine is up, so while the weights
load a probe is refused. A process that is stopped (SIGSTOP) or wedged still
has its socket: the kernel accepts the connection and nothing answers, so
the probe times out. Only that case calls for a restart.

vLLM does not guard /health with its API key; a probe given ``api_key``
sends it all the same (vllm_client.headers()), for a proxy in front that
does, and a 401 says which setting is missing.
"""

from __future__ import annotations

import errno
import socket
import time

from ansible.module_utils.urls import open_url
from ansible_collections.laguna.spark.plugins.module_utils import vllm_client

HEALTHY, HUNG, DOWN, UNHEALTHY = "healthy", "hung", "down", "unhealthy"


def classify(exc):
    """State of a server whose probe raised ``exc``."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason).lower():
        return HUNG
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return UNHEALTHY
    if isinstance(reason, OSError) and reason.errno in (errno.ECONNREFUSED, errno.ECONNRESET,
                                                        errno.EHOSTUNREACH, errno.ENETUNREACH):
        return DOWN
    if "refused" in str(reason).lower():
        return DOWN
    return UNHEALTHY


def probe(url, timeout, opener=open_url, api_key=None):
    """(state, status, seconds, detail) of GET url (with the API key as a Bearer token when set)."""
    start = time.monotonic()
    try:
        response = opener(url, method="GET", timeout=timeout, validate_certs=False,
                          headers=vllm_client.headers(api_key, accept="*/*"))
        status = response.getcode()
        state = HEALTHY if status == 200 else UNHEALTHY
        detail = "HTTP %d" % status
    except Exception as exc:  # open_url raises URLError, HTTPError, socket errors
        status = getattr(exc, "code", None)
        state = classify(exc)
        detail = (vllm_client.unauthorized_message(url, api_key) if status == 401
                  else str(getattr(exc, "reason", exc)))
    return state, status, round(time.monotonic() - start, 3), detail
