# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Talk to a vLLM OpenAI-compatible server (through ansible.module_utils.urls).

Every request helper takes ``api_key``: when set, the request carries
``Authorization: Bearer <key>`` (headers(), the one place that builds a
request's headers). vLLM checks it on the paths under /v1, /v2 and
/inference when it serves with a key (--api-key or VLLM_API_KEY); a 401
raises Unauthorized, whose message names the fix and never the key.
"""

from __future__ import annotations

import json
import ssl
import time

from ansible.module_utils.urls import Request
from ansible_collections.laguna.spark.plugins.module_utils import bench_stats, prometheus


def server_options():
    """The argument spec of the options that the doc fragment vllm_server
    documents (url, api_key), for a module's own argument spec (a new dict
    each call)."""
    return dict(url=dict(type="str", default="http://127.0.0.1:8000"), api_key=dict(type="str", no_log=True))


# A block of ordinary Python the draft model can predict well; repeated with
# a counter so the prompt is not one line over and over.
_CODE_UNIT = '''
def merge_intervals_{n}(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged

'''
_CODE_HEAD = "Review the following Python module, then rewrite it as one documented, tested function:\n\n"


class ServerError(Exception):
    """The server answered with an error; the message carries its explanation."""


class Unauthorized(ServerError):
    """401: the server wants an API key, or another one."""


def headers(api_key=None, accept="application/json", json_body=False):
    """The headers of a request: Accept, Content-Type for a JSON body, the key as a Bearer token."""
    out = {"Accept": accept}
    if json_body:
        out["Content-Type"] = "application/json"
    if api_key:
        out["Authorization"] = "Bearer " + api_key
    return out


def unauthorized_message(url, api_key):
    """What a 401 means, naming the fix (the key itself never)."""
    if api_key:
        return ("401 Unauthorized: %s refused the API key sent; set vllm_serve_api_key (the api_key option) "
                "to the key vLLM serves with (its VLLM_API_KEY or --api-key)" % url)
    return ("401 Unauthorized: %s requires an API key; set vllm_serve_api_key (the api_key option) "
            "to the key vLLM serves with (its VLLM_API_KEY or --api-key)" % url)


_CONTEXTS = {}


def _context(url):
    """An SSL context made once per process.

    open_url() builds a fresh default context (loading the CA store, ~0.1 s)
    for every request, which would count in every TTFT; plain http:// needs
    none, so it gets a bare one.
    """
    kind = "https" if url.startswith("https:") else "http"
    if kind not in _CONTEXTS:
        _CONTEXTS[kind] = ssl.create_default_context() if kind == "https" else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return _CONTEXTS[kind]


def _open(url, payload=None, timeout=30, accept="application/json", api_key=None):
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    try:
        return Request().open("POST" if data is not None else "GET", url, data=data,
                              headers=headers(api_key, accept, data is not None),
                              timeout=timeout, follow_redirects="none", context=_context(url))
    except Exception as exc:  # HTTPError carries the server's explanation in its body
        if getattr(exc, "code", None) == 401:
            raise Unauthorized(unauthorized_message(url, api_key))
        body = ""
        reader = getattr(exc, "read", None)
        if reader is not None:
            try:
                body = reader().decode("utf-8", "replace")
            except Exception:  # an unreadable body leaves the status alone
                body = ""
        if body:
            try:
                detail = json.loads(body).get("error")
                body = detail.get("message", body) if isinstance(detail, dict) else (detail or body)
            except (ValueError, AttributeError):
                pass
            raise ServerError("%s %s: %s" % (getattr(exc, "code", "?"), url, body))
        raise


def get_text(url, timeout=30, api_key=None):
    with _open(url, timeout=timeout, accept="*/*", api_key=api_key) as response:
        return response.read().decode("utf-8")


def get_json(url, timeout=30, api_key=None):
    return json.loads(get_text(url, timeout, api_key))


def post_json(url, payload, timeout=300, api_key=None):
    with _open(url, payload, timeout, api_key=api_key) as response:
        return json.loads(response.read().decode("utf-8"))


def first_model(base_url, timeout=30, api_key=None):
    return model_info(base_url, timeout, api_key=api_key)["id"]


def model_info(base_url, timeout=30, model=None, api_key=None):
    """The /v1/models entry of ``model`` (the first one when unset)."""
    models = get_json(base_url.rstrip("/") + "/v1/models", timeout, api_key)["data"]
    for entry in models:
        if model is None or entry.get("id") == model:
            return entry
    raise ServerError("%s serves %s, not %s" % (base_url, ", ".join(m.get("id", "?") for m in models), model))


def server_version(base_url, timeout=30, api_key=None):
    """vLLM's /version, or None when the server has none."""
    try:
        return get_json(base_url.rstrip("/") + "/version", timeout, api_key).get("version")
    except Exception:  # an old or foreign server: the version is unknown, not an error
        return None


def metric_sums(base_url, timeout=30, api_key=None):
    return prometheus.sums(get_text(base_url.rstrip("/") + "/metrics", timeout, api_key))


def spec_counters(base_url, timeout=30, api_key=None):
    return bench_stats.spec_counters(get_text(base_url.rstrip("/") + "/metrics", timeout, api_key))


def tokenize(base_url, model, prompt=None, messages=None, add_special_tokens=None, timeout=300, api_key=None):
    """POST /tokenize (vLLM's request and response shape): {count, tokens, max_model_len}."""
    payload = {"model": model}
    if messages is not None:
        payload["messages"] = messages
    else:
        payload["prompt"] = prompt
    if add_special_tokens is not None:
        payload["add_special_tokens"] = add_special_tokens
    return post_json(base_url.rstrip("/") + "/tokenize", payload, timeout, api_key)


def detokenize(base_url, model, tokens, timeout=300, api_key=None):
    return post_json(base_url.rstrip("/") + "/detokenize", {"model": model, "tokens": list(tokens)},
                     timeout, api_key)["prompt"]


def code_prompt(target_tokens, chars_per_token=3.5, head=_CODE_HEAD):
    """A code-review prompt of about ``target_tokens`` tokens."""
    body, size = [], 0
    budget = int(target_tokens * chars_per_token) - len(head)
    while size < budget:
        body.append(_CODE_UNIT.format(n=len(body)))
        size += len(body[-1])
    return head + "".join(body)


def user(content):
    return [{"role": "user", "content": content}]


def exact_prompt(base_url, model, target_tokens, salt="", timeout=300, attempts=8, api_key=None):
    """A code prompt whose chat request is exactly ``target_tokens`` tokens long.

    The served model's tokenizer counts (through /tokenize): the content is
    cut from a tokenized code text at a token boundary (/detokenize), and the
    cut moves until the whole chat prompt, template included, has the target
    count. ``salt`` starts the content, so that requests with different salts
    share no cached prefix. Returns {content, prompt_tokens, exact, attempts}.
    """
    overhead = tokenize(base_url, model, messages=user(""), timeout=timeout, api_key=api_key)["count"]
    need = target_tokens - overhead
    if need < 1:
        raise ValueError("%d prompt tokens is less than the chat template's own %d" % (target_tokens, overhead))
    head = salt + _CODE_HEAD
    chars_per_token, raw = 3.5, []
    for _attempt in range(6):
        text = code_prompt(int(need * 1.1) + 64, chars_per_token, head)
        raw = tokenize(base_url, model, prompt=text, add_special_tokens=False, timeout=timeout,
                       api_key=api_key)["tokens"]
        if len(raw) >= need:
            break
        chars_per_token = chars_per_token * 1.25 * need / max(len(raw), 1)
    else:
        raise ValueError("could not build a prompt of %d tokens (got %d)" % (target_tokens, len(raw)))
    cut, best = need, None
    for attempt in range(1, attempts + 1):
        content = detokenize(base_url, model, raw[:cut], timeout, api_key)
        count = tokenize(base_url, model, messages=user(content), timeout=timeout, api_key=api_key)["count"]
        if best is None or abs(count - target_tokens) < abs(best["prompt_tokens"] - target_tokens):
            best = {"content": content, "prompt_tokens": count, "exact": count == target_tokens,
                    "attempts": attempt}
        if count == target_tokens:
            break
        moved = max(1, min(len(raw), cut + target_tokens - count))
        if moved == cut:
            break
        cut = moved
    return best


def stream_chat(base_url, payload, timeout=600, clock=time.monotonic, api_key=None):
    """POST a streaming chat completion; yield ``(time, chunk)`` per SSE event."""
    with _open(base_url.rstrip("/") + "/v1/chat/completions", dict(payload, stream=True),
               timeout, accept="text/event-stream", api_key=api_key) as response:
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            yield clock(), json.loads(data)


def measure_stream(events, started):
    """TTFT and decode rate from ``(time, chunk)`` events of one stream.

    decode tok/s = (completion_tokens - 1) / (t_last - t_first), the first
    token being the prefill's; completion_tokens comes from the usage chunk.
    """
    t_first = t_last = None
    usage = None
    text, token_ids = [], []
    for at, chunk in events:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            token_ids.extend(choice.get("token_ids") or [])
            if piece:
                text.append(piece)
                t_first = at if t_first is None else t_first
                t_last = at
    completion = (usage or {}).get("completion_tokens")
    return {
        "ttft_s": (t_first - started) if t_first is not None else None,
        "completion_tokens": completion,
        "prompt_tokens": (usage or {}).get("prompt_tokens"),
        "decode_s": (t_last - t_first) if t_first is not None else None,
        "decode_tok_s": bench_stats.decode_rate(completion, t_first, t_last),
        "text": "".join(text),
        "token_ids": token_ids,
    }


def greedy_tokens(base_url, model, content, max_tokens, timeout=600, api_key=None):
    """Token ids and text of a temperature-0 completion (vLLM's return_token_ids)."""
    answer = post_json(base_url.rstrip("/") + "/v1/chat/completions", {
        "model": model, "messages": user(content), "temperature": 0, "max_tokens": max_tokens,
        "ignore_eos": True, "return_token_ids": True}, timeout, api_key)
    choice = answer["choices"][0]
    return {"token_ids": choice.get("token_ids"), "text": (choice.get("message") or {}).get("content") or "",
            "completion_tokens": (answer.get("usage") or {}).get("completion_tokens")}
