"""Speed model and tokenizer of the stand-in `vllm serve`.

The benchmark (playbooks/benchmark.yml) measures decode tok/s, acceptance per
draft position and TTFT. On the stand-in those figures follow from a few
variables, so that a test can compute what the benchmark must report:

  LAGUNA_STANDIN_TOKENS_PER_S    target decode rate without a draft; one
                                 target step takes 1 / this (default 200).
  LAGUNA_STANDIN_DRAFT_COST      extra time per draft token and step, as a
                                 share of a target step (default 0.177): a
                                 step with k draft tokens takes
                                 step * (1 + DRAFT_COST * k).
  LAGUNA_STANDIN_ACCEPTANCE_PER_POS
                                 comma-separated probability that draft
                                 position i is accepted, e.g.
                                 "0.89,0.76,0.65,0.55,0.48,0.41". A position
                                 counts only if all before it were accepted
                                 (the list is made non-increasing). For k past
                                 the list it continues geometrically with the
                                 ratio of the last two entries.
  LAGUNA_STANDIN_ACCEPTANCE      used when the list is unset (default 0.75):
                                 every step accepts round(k * this) tokens
                                 exactly; 0 stands for a mismatched draft.
  LAGUNA_STANDIN_ACCEPTANCE_FILE a file that, while it exists and holds a
                                 number, replaces both above for the steps
                                 that follow (as LAGUNA_STANDIN_ACCEPTANCE
                                 does): a test changes the acceptance of a
                                 running server, e.g. to 0 and back by
                                 removing the file.
  LAGUNA_STANDIN_PREFILL_TOKENS_PER_S
                                 prefill rate; the first token comes
                                 prompt_tokens / this after the request
                                 (default 50000).
  LAGUNA_STANDIN_LOSSY           "1": output with a draft differs from the
                                 output without one (a broken verifier), so a
                                 greedy-identity check has something to find.

Whether a position is accepted is drawn from a deterministic low-discrepancy
sequence (the fractional parts of n times the golden ratio), not from a random
generator: over n steps the share of steps accepting position i differs from
its probability by O(log n / n), and two runs with the same inputs emit the
same tokens at the same steps.

The tokenizer splits text into runs of up to four word characters, runs of up
to four blanks, and single other characters; ids are a hash of the piece, so
they are the same in every stand-in process. A chat prompt is BOS, then per
message a role token, the content and an end token, then the assistant token
when a generation prompt is added (vLLM's /tokenize and usage count the same
way for a real chat template).
"""

from __future__ import annotations

import math
import os
import re
import threading
import zlib

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
# Questions with a known answer (the recipe's smoke test).
ANSWERS = {"capital of france": "Paris"}

REPLY = (
    "def merge_intervals(intervals):\n"
    "    ordered = sorted(intervals, key=lambda pair: pair[0])\n"
    "    merged = []\n"
    "    for start, end in ordered:\n"
    "        if merged and start <= merged[-1][1]:\n"
    "            merged[-1][1] = max(merged[-1][1], end)\n"
    "        else:\n"
    "            merged.append([start, end])\n"
    "    return merged\n"
).split(" ")


def _env_float(env, name, default):
    value = env.get(name)
    return float(value) if value not in (None, "") else default


def per_position(k, listed=None, acceptance=0.75):
    """Acceptance probability of each of the k draft positions."""
    if k <= 0:
        return []
    if not listed:
        accepted = int(round(k * acceptance))
        return [1.0] * accepted + [0.0] * (k - accepted)
    probs, floor = [], 1.0
    for value in listed:
        floor = min(floor, max(0.0, min(1.0, float(value))))
        probs.append(floor)
    ratio = probs[-1] / probs[-2] if len(probs) > 1 and probs[-2] > 0 else 1.0
    while len(probs) < k:
        probs.append(probs[-1] * ratio)
    return probs[:k]


class SpeedModel:
    """Time per step, acceptance per position and prefill rate of one server."""

    def __init__(self, k=0, env=None):
        env = os.environ if env is None else env
        self.k = int(k or 0)
        self.step_s = 1.0 / _env_float(env, "LAGUNA_STANDIN_TOKENS_PER_S", 200.0)
        self.draft_cost = _env_float(env, "LAGUNA_STANDIN_DRAFT_COST", 0.177)
        self.prefill_rate = _env_float(env, "LAGUNA_STANDIN_PREFILL_TOKENS_PER_S", 50000.0)
        listed = [v for v in (env.get("LAGUNA_STANDIN_ACCEPTANCE_PER_POS") or "").split(",") if v.strip()]
        self.per_position = per_position(
            self.k, listed, _env_float(env, "LAGUNA_STANDIN_ACCEPTANCE", 0.75))
        self.override_file = env.get("LAGUNA_STANDIN_ACCEPTANCE_FILE") or None
        self.lossy = env.get("LAGUNA_STANDIN_LOSSY") == "1"
        self.draws = 0
        self.lock = threading.Lock()

    # -- timing -----------------------------------------------------------
    def step_seconds(self):
        """Wall time of one decode step (target plus draft and verification)."""
        return self.step_s * (1.0 + self.draft_cost * self.k)

    def prefill_seconds(self, prompt_tokens):
        return prompt_tokens / self.prefill_rate

    # -- acceptance -------------------------------------------------------
    def current_per_position(self):
        """The acceptance of each position now: the override file's while it holds a number
        (read at every step: a few bytes, and no rewrite within one timestamp tick goes unseen)."""
        if not self.override_file:
            return self.per_position
        try:
            with open(self.override_file) as handle:
                return per_position(self.k, None, float(handle.read().strip()))
        except (OSError, ValueError):
            return self.per_position

    def accepted_this_step(self):
        """Draft tokens the next step accepts: the prefix of positions that pass."""
        with self.lock:
            self.draws += 1
            u = (self.draws * GOLDEN) % 1.0
        accepted = 0
        for prob in self.current_per_position():
            if u >= prob:
                break
            accepted += 1
        return accepted

    def expected(self):
        """Long-run figures the benchmark should measure on this server."""
        accepted = sum(self.per_position)
        return {
            "k": self.k,
            "per_position": list(self.per_position),
            "accepted_per_draft": accepted,
            "acceptance_rate": accepted / self.k if self.k else None,
            "mean_acceptance_length": 1.0 + accepted if self.k else None,
            "step_s": self.step_seconds(),
            "decode_tok_s": (1.0 + accepted) / self.step_seconds(),
            "baseline_tok_s": 1.0 / self.step_s,
        }

    # -- generation -------------------------------------------------------
    def reply_tokens(self, prompt, max_tokens, speculative):
        """The greedy output for ``prompt``: the same with or without a draft.

        A question of ANSWERS gets its answer alone, then the sequence ends
        (the smoke test's).
        """
        start = zlib.crc32(prompt.encode("utf-8")) % len(REPLY)
        answer = [text for key, text in ANSWERS.items() if key in prompt.lower()]
        if answer:  # the answer, then end of sequence, as the model does
            return answer[0].split(" ")[:max_tokens]
        tokens = [REPLY[(start + i) % len(REPLY)] + " " for i in range(max_tokens)]
        if speculative and self.lossy and max_tokens > 3:
            tokens[3] = "lossy "
        return tokens

    def steps(self, prompt, prompt_tokens, max_tokens):
        """(seconds to wait, tokens, accepted draft tokens or None) per engine step.

        The first step is the prefill, which emits one token; each decode step
        after it emits one target token plus the draft tokens it accepted.
        """
        tokens = self.reply_tokens(prompt, max_tokens, bool(self.k))
        if not tokens:
            return
        yield self.prefill_seconds(prompt_tokens), tokens[:1], None
        produced = 1
        while produced < len(tokens):
            accepted = self.accepted_this_step() if self.k else 0
            group = min(1 + accepted, len(tokens) - produced)
            yield self.step_seconds(), tokens[produced:produced + group], (group - 1 if self.k else None)
            produced += group


# -- tokenizer -------------------------------------------------------------
_PIECE = re.compile(r"\w{1,4}|\s{1,4}|[^\w\s]", re.UNICODE)
SPECIAL = {"<s>": 1, "<|end|>": 2, "<|assistant|>": 3, "<|user|>": 4, "<|system|>": 5, "<|tool|>": 6}
_SPECIAL_TEXT = {v: k for k, v in SPECIAL.items()}
_VOCAB = {}
_VOCAB_LOCK = threading.Lock()


def token_id(piece):
    ident = 1000 + zlib.crc32(piece.encode("utf-8")) % 2000000000
    with _VOCAB_LOCK:
        _VOCAB[ident] = piece
    return ident


def encode(text):
    return [token_id(piece) for piece in _PIECE.findall(text)]


def decode(ids):
    out = []
    for ident in ids:
        if ident in _SPECIAL_TEXT:
            out.append(_SPECIAL_TEXT[ident])
        elif ident in _VOCAB:
            out.append(_VOCAB[ident])
        else:
            raise ValueError("token id %d is not in the vocabulary" % ident)
    return "".join(out)


def _content(message):
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


def chat_ids(messages, add_generation_prompt=True):
    ids = [SPECIAL["<s>"]]
    for message in messages:
        ids.append(SPECIAL.get("<|%s|>" % message.get("role", "user"), SPECIAL["<|user|>"]))
        ids.extend(encode(_content(message)))
        ids.append(SPECIAL["<|end|>"])
    if add_generation_prompt:
        ids.append(SPECIAL["<|assistant|>"])
    return ids


def prompt_ids(request, chat):
    """Token ids of a completion or chat request's prompt, as usage counts them."""
    if chat:
        return chat_ids(request.get("messages") or [])
    prompt = request.get("prompt", "")
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    return [SPECIAL["<s>"]] + encode(prompt if isinstance(prompt, str) else "".join(prompt))


def prompt_text(request, chat):
    if chat:
        return "".join(_content(m) for m in request.get("messages") or [])
    prompt = request.get("prompt", "")
    return prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)


def error(code, message):
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(code, "InternalServerError")
    return code, {"error": {"message": message, "type": kind, "param": None, "code": code}}


def too_long(prompt_tokens, max_tokens, max_model_len):
    """vLLM's 400 for a request that does not fit the context, else None."""
    if max_model_len and prompt_tokens + max_tokens > max_model_len:
        return error(400, "This model's maximum context length is %d tokens. However, you requested "
                          "%d tokens (%d in the messages, %d in the completion). Please reduce the "
                          "length of the messages or completion."
                     % (max_model_len, prompt_tokens + max_tokens, prompt_tokens, max_tokens))
    return None


def tokenizer_endpoint(path, request, model_name, max_model_len):
    """(status, body) of POST /tokenize or /detokenize, shaped like vLLM 0.25's."""
    if request.get("model") not in (None, model_name):
        return error(404, "The model `%s` does not exist." % request.get("model"))
    if path == "/detokenize":
        tokens = request.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
            return error(400, "tokens must be a list of non-negative integers")
        try:
            return 200, {"prompt": decode(tokens)}
        except ValueError as exc:
            return error(400, str(exc))
    if "messages" in request:
        if request.get("continue_final_message") and request.get("add_generation_prompt"):
            return error(400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        ids = chat_ids(request["messages"], request.get("add_generation_prompt", True))
        if request.get("add_special_tokens"):
            ids = [SPECIAL["<s>"]] + ids
    elif isinstance(request.get("prompt"), str):
        ids = encode(request["prompt"])
        if request.get("add_special_tokens", True):
            ids = [SPECIAL["<s>"]] + ids
    else:
        return error(400, "a tokenize request needs `prompt` (a string) or `messages`")
    body = {"count": len(ids), "max_model_len": max_model_len or 0, "tokens": ids, "token_strs": None}
    if request.get("return_token_strs"):
        body["token_strs"] = [_SPECIAL_TEXT.get(i) or _VOCAB.get(i, "") for i in ids]
    return 200, body
