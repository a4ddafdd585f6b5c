# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Tell a hung vLLM from one that is down or still starting; read what it serves.

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
import json
import socket
import time

from ansible.module_utils.urls import open_url
from ansible_collections.laguna.spark.plugins.module_utils import vllm_client, vllm_log
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

HEALTHY, HUNG, DOWN, UNHEALTHY = "healthy", "hung", "down", "unhealthy"


def server_module(default_timeout):
    """The AnsibleModule of a module that only sends a GET to vLLM's API: its
    options (url, api_key, timeout; doc fragment vllm_server), the timeout
    checked (at least 1 s)."""
    module = new_module(dict(vllm_client.server_options(), timeout=dict(type="int", default=default_timeout)))
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, not %d" % module.params["timeout"])
    return module


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


def models(base_url, timeout, opener=open_url, api_key=None):
    """What GET <base_url>/v1/models says: {"up", "status", "models", "detail"}.

    ``up`` is HTTP 200 (the server lists its models: the engine is loaded);
    ``models`` the ids it lists. Nothing answering (refused, timed out) is
    status -1 and not up; any other status is not up either, with the
    reason in ``detail`` (a 401 names the key setting). Never raises for an
    unanswered request: a server still loading is an outcome, not an error.
    """
    url = base_url.rstrip("/") + "/v1/models"
    try:
        response = opener(url, method="GET", timeout=timeout, validate_certs=False,
                          headers=vllm_client.headers(api_key))
        status, body = response.getcode(), response.read()
    except Exception as exc:  # open_url raises URLError, HTTPError, socket errors
        status = getattr(exc, "code", None)
        if not isinstance(status, int):
            return {"up": False, "status": -1, "models": [], "detail": str(getattr(exc, "reason", exc))}
        detail = (vllm_client.unauthorized_message(url, api_key) if status == 401
                  else "HTTP %s: %s" % (status, getattr(exc, "reason", exc)))
        return {"up": False, "status": status, "models": [], "detail": detail}
    if status != 200:
        return {"up": False, "status": status, "models": [], "detail": "HTTP %s" % status}
    try:
        data = json.loads(body.decode("utf-8")).get("data") or []
        ids = [entry.get("id") for entry in data if isinstance(entry, dict)]
    except (ValueError, AttributeError, UnicodeDecodeError):
        return {"up": True, "status": status, "models": [], "detail": "HTTP 200, but not a model list"}
    return {"up": True, "status": status, "models": ids, "detail": "HTTP 200"}


def down_message(url, waited, unit, active_state, result, journal_lines, tensor_parallel_size, keep=15):
    """Why the API at ``url`` did not list its models within ``waited`` seconds, for the failure.

    Names the unit's state; when vLLM's log says it waits for a placement
    group, the cause (Ray lacks GPUs: a worker raylet is down, most often
    because lingering is off) and the fix; then the last ``keep`` log lines.
    """
    hint = ""
    if vllm_log.waits_for_placement_group(journal_lines):
        hint = ("vLLM is waiting for a placement group: Ray lacks the GPUs for TP %s. Is a worker raylet down "
                "(lingering off, so it died with its SSH session)? Check `ray status` and rerun "
                "--tags linger,ray_cluster. " % tensor_parallel_size)
    last = list(journal_lines or [])[-keep:] if keep else []
    return "%s/v1/models did not answer within %ss; %s is %s/%s. %sLast log lines: %s" % (
        url, waited, unit, active_state, result, hint, " | ".join(last))
