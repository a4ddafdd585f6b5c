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


def server_module(default_timeout, **options):
    """The AnsibleModule of a module that sends requests to vLLM's API: its
    options (url, api_key, timeout; doc fragment vllm_server, and the
    module's own ``options``), the timeout checked (at least 1 s)."""
    module = new_module(dict(vllm_client.server_options(), timeout=dict(type="int", default=default_timeout),
                             **options))
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


# The counter of tokens vLLM's engine generated (PrometheusStatLogger's
# vllm:generation_tokens): it moves whenever the engine steps for anyone.
GENERATION_TOKENS = "vllm:generation_tokens_total"
# What one smoke test found. ANSWERED is the only success; HUNG (no answer
# within the timeout and no token generated meanwhile: the engine is wedged)
# is the one a restart clears; BUSY (no answer while the engine generated
# for other requests) is not a fault.
ANSWERED, WRONG, FAILED, BUSY = "answered", "wrong", "failed", "busy"


# The smoke option of the modules that run it (doc fragment vllm_server.smoke).
SMOKE_OPTIONS = dict(type="dict", options=dict(
    model=dict(type="str", required=True), prompt=dict(type="str", required=True),
    max_tokens=dict(type="int", default=8, no_log=False), expect=dict(type="str", default=""), timeout=dict(type="int")))


def smoke_request(model, prompt, max_tokens):
    """The recipe's smoke test as vLLM's chat API takes it: one user message at temperature 0."""
    return {"model": model, "temperature": 0, "max_tokens": int(max_tokens), "messages": vllm_client.user(prompt)}


def generated_tokens(base_url, timeout, api_key=None, sums=vllm_client.metric_sums):
    """vLLM's generated-token counter now, or None when /metrics does not answer."""
    try:
        return sums(base_url, timeout, api_key).get(GENERATION_TOKENS)
    except Exception:  # a server that does not answer has no count; the caller judges
        return None


def smoke(base_url, model, prompt, max_tokens, expect, timeout, api_key=None,
          post=vllm_client.post_json, sums=vllm_client.metric_sums, clock=time.monotonic):
    """Run the smoke test once and judge it: {state, ok, content, completion_tokens, seconds, message}.

    ``state``: ANSWERED (text that holds ``expect``, case aside; any text
    when ``expect`` is empty), WRONG (an answer without it), FAILED (an HTTP
    error or not a completion), DOWN (refused), HUNG or BUSY when nothing
    answered within ``timeout`` seconds: HUNG when vLLM's generated-token
    counter did not move meanwhile (or /metrics did not answer either),
    BUSY when it did. A vLLM whose engine is wedged lists its models and
    answers /health while no request finishes: only a generation shows it.
    ``message`` says what was found, in one sentence for the run's output.
    """
    url = base_url.rstrip("/")
    asked = "%s to %s at temperature 0" % (model, json.dumps(prompt))
    before = generated_tokens(url, min(timeout, 10), api_key, sums)
    start = clock()
    result = {"ok": False, "content": None, "completion_tokens": None}
    try:
        answer = post(url + "/v1/chat/completions", smoke_request(model, prompt, max_tokens), timeout, api_key)
    except vllm_client.ServerError as exc:  # the server's own explanation (401 included)
        result.update(state=FAILED, message="The smoke test (%s) failed: %s" % (asked, exc))
    except Exception as exc:  # timeouts and refusals, as the /health probe tells them
        state = classify(exc)
        if state == HUNG:
            after = generated_tokens(url, min(timeout, 10), api_key, sums)
            moved = before is not None and after is not None and after > before
            state = BUSY if moved else HUNG
            why = ("vLLM generated %d tokens for other requests meanwhile: it is busy, not hung" % (after - before)
                   if moved else "vLLM generated no token meanwhile: its engine is wedged, and a restart clears it")
            result.update(state=state, message="The smoke test (%s) got no answer within %s s; %s."
                          % (asked, timeout, why))
        else:
            result.update(state=DOWN if state == DOWN else FAILED, message="The smoke test (%s) got no answer: %s"
                          % (asked, getattr(exc, "reason", exc)))
    else:
        try:
            content = answer["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            content = None
        if content is None:
            result.update(state=FAILED, message="The smoke test (%s) got no completion: %s"
                          % (asked, json.dumps(answer)[:2000]))
        else:
            tokens = (answer.get("usage") or {}).get("completion_tokens")
            ok = bool(content.strip()) and (expect or "").lower() in content.lower()
            result.update(content=content, completion_tokens=tokens, ok=ok, state=ANSWERED if ok else WRONG)
            result["message"] = ("%s tokens: %s" % ("?" if tokens is None else tokens, _shortened(content)) if ok else
                                 "%s answered %s to %s at temperature 0, expected %s: a wrong or empty answer from a "
                                 "healthy API means wrong weights (a bad shard: rerun --tags staging) or a broken "
                                 "patch (--tags vllm_patch). Full response: %s"
                                 % (model, json.dumps(content), json.dumps(prompt), json.dumps(expect),
                                    json.dumps(answer)[:2000]))
    result["seconds"] = round(clock() - start, 3)
    return result


def _shortened(text, most=80):
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 3] + "..."


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


def check(base_url, timeout, api_key=None, smoke_options=None):
    """What the vllm_health module returns: /health within ``timeout`` s,
    then, when it answers and ``smoke_options`` (SMOKE_OPTIONS' keys) are
    given, the smoke test within ``smoke_options["timeout"]`` or ``timeout``;
    a smoke test that finds the engine wedged makes the state HUNG. Raises
    ValueError for a smoke timeout or max_tokens below 1."""
    url = base_url.rstrip("/")
    state, status, seconds, detail = probe(url + "/health", timeout, api_key=api_key)
    result = dict(state=state, status=status, seconds=seconds, detail=detail)
    if smoke_options and state == HEALTHY:
        smoke_timeout = smoke_options.get("timeout") or timeout
        max_tokens = smoke_options.get("max_tokens", 8)
        if smoke_timeout < 1 or max_tokens < 1:
            raise ValueError("smoke.timeout and smoke.max_tokens must be at least 1, not %d and %d"
                             % (smoke_timeout, max_tokens))
        result["smoke"] = smoke(url, smoke_options["model"], smoke_options["prompt"], max_tokens,
                                smoke_options.get("expect") or "", smoke_timeout, api_key=api_key)
        if result["smoke"]["state"] == HUNG:  # a wedged engine: a restart clears it
            result.update(state=HUNG, detail=result["smoke"]["message"])
    return result
