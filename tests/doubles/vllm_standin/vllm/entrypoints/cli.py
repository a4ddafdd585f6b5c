"""`vllm serve` stand-in for the laguna-spark tests.

What it does like vLLM, because the collection depends on it:
  * the same flags (unknown ones are an error, so a typo in the rendered
    command fails the test);
  * loads the DFlash draft through vllm.model_executor.models.laguna_dflash
    with a W4A16-style quant config that has no get_cache_scale, so an
    unpatched install dies with the real AttributeError;
  * with --distributed-executor-backend ray, joins the Ray cluster and
    reserves one GPU bundle per tensor-parallel rank in a placement group,
    logging vLLM's "Waiting for creating a placement group" until it fits,
    and starts one RayWorkerWrapper actor per bundle (vLLM's TP ranks, run by
    each node's raylet) that holds the node's GPU: a flock on the stand-in
    device file, whose holders the nvidia-smi stand-in reports;
  * serves /v1/models, /v1/chat/completions (also streaming, with usage),
    /v1/completions, /health and /metrics with the spec-decode counters;
  * an API key as vLLM 0.25.1 takes it: `--api-key` declared as vLLM's
    parser declares it (one or more keys; "" and "None" stand for none),
    else the VLLM_API_KEY environment variable (api_key_tokens()); with a
    key, a request to a path under /v1, /v2 or /inference (OPTIONS aside)
    needs `Authorization: Bearer <a key>` (the scheme in any case) or is
    answered 401 {"error":"Unauthorized"}, byte for byte vLLM's
    AuthenticationMiddleware; /health, /metrics, /tokenize, /detokenize and
    /version stay open (authorized(), compared with vLLM's middleware by
    tests/conformance/test_vllm_api_key.py).
What it fakes: the tokens. It streams a fixed code snippet word by word at
LAGUNA_STANDIN_TOKENS_PER_S, accepting LAGUNA_STANDIN_ACCEPTANCE of each
k-token draft (0 stands for a mismatched draft).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from vllm.entrypoints import speed_model


def log(msg, where="standin.py:1"):
    """A log line in vLLM's format: "INFO 12-03 06:43:10 [file.py:line] message"."""
    sys.stderr.write("INFO %s [%s] %s\n" % (time.strftime("%m-%d %H:%M:%S"), where, msg))
    sys.stderr.flush()


# What the recipe's run logs: a 273,095-token KV pool from 5 GiB per rank, 1.04x
# of the 262,144-token context.  The stand-in scales it with its flags.
RECIPE_KV_TOKENS_PER_BYTE = 273095 / 5368709120.0


def log_kv_cache(kv_cache_memory_bytes, max_model_len):
    """vLLM's two KV-pool lines (v1/core/kv_cache_utils.py)."""
    tokens = int(round((kv_cache_memory_bytes or 5368709120) * RECIPE_KV_TOKENS_PER_BYTE))
    max_model_len = max_model_len or 262144
    log("GPU KV cache size: %s tokens" % format(tokens, ","), "kv_cache_utils.py:2146")
    log("Maximum concurrency for %s tokens per request: %.2fx"
        % (format(max_model_len, ","), tokens / float(max_model_len)), "kv_cache_utils.py:2147")


def log_draft_kernel():
    """vLLM's kernel choice for the W4A16 draft's layers (compressed_tensors_wNa16.py)."""
    log("Using %s for CompressedTensorsWNA16" % "MarlinLinearKernel", "compressed_tensors_wNa16.py:137")


# vllm/entrypoints/serve/utils/server_utils.py: the paths the API key guards.
GUARDED_PREFIX = ("/v1", "/v2", "/inference")
# What vLLM's AuthenticationMiddleware answers (a starlette JSONResponse).
UNAUTHORIZED = (401, json.dumps({"error": "Unauthorized"}, separators=(",", ":")))


def optional_str(value):
    """vLLM's optional_type(str) (vllm/engine/arg_utils.py): "" and "None" are None."""
    return None if value in ("", "None") else str(value)


def api_key_tokens(api_key, environ=None):
    """The keys the server accepts, as vLLM's build_app picks them
    (vllm/entrypoints/openai/api_server.py):
    ``[key for key in (args.api_key or [envs.VLLM_API_KEY]) if key]``;
    an empty list serves without a key."""
    environ = os.environ if environ is None else environ
    return [key for key in (api_key or [environ.get("VLLM_API_KEY")]) if key]


def authorized(path, method, authorization, tokens):
    """Whether a request passes vLLM's AuthenticationMiddleware.

    path is the request's decoded path (no query), method its HTTP method,
    authorization its first Authorization header or None, tokens the keys of
    api_key_tokens() (none: vLLM adds no middleware and lets everything in).
    Like vLLM: OPTIONS and paths outside GUARDED_PREFIX pass; otherwise the
    header must be "<scheme> <key>" with the scheme "bearer" in any case and
    the key's sha256 equal to one token's (compared in constant time).
    """
    if not tokens or method == "OPTIONS" or not path.startswith(GUARDED_PREFIX):
        return True
    if not authorization:
        return False
    scheme, _sep, param = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    digest = hashlib.sha256(param.encode("utf-8")).digest()
    match = False
    for token in tokens:
        match |= secrets.compare_digest(digest, hashlib.sha256(token.encode("utf-8")).digest())
    return match


def parser():
    top = argparse.ArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name")
    serve.add_argument("--distributed-executor-backend", choices=["ray", "mp", "uni"], default="mp")
    serve.add_argument("--tensor-parallel-size", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", type=int, default=1)
    serve.add_argument("--enforce-eager", action="store_true")
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--kv-cache-memory-bytes", type=int)
    serve.add_argument("--gpu-memory-utilization", type=float)
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--max-num-batched-tokens", type=int)
    serve.add_argument("--speculative-config")
    serve.add_argument("--trust-remote-code", action="store_true")
    serve.add_argument("--dtype")
    serve.add_argument("--kv-cache-dtype")
    # vLLM's FrontendArgs.api_key (list[str] | None): nargs="+", optional_type(str).
    serve.add_argument("--api-key", nargs="+", type=optional_str, default=None)
    sub.add_parser("--version")
    return top


class W4A16Config:
    """A quantization config of the kind the DFlash draft ships: no get_cache_scale."""

    def get_name(self):
        return "compressed-tensors-w4a16"


def load_draft(spec):
    from vllm.model_executor.models.laguna_dflash import DFlashLagunaForCausalLM
    draft = DFlashLagunaForCausalLM(quant_config=W4A16Config())
    draft.load_weights([("layers.0.self_attn.qkv_proj.weight", b"w"),
                        ("layers.0.self_attn.attn.k_scale", b"s")])
    log("Loaded DFlash draft %s (%d speculative tokens)" % (spec["model"], spec["num_speculative_tokens"]))


def reserve_gpus(tp_size):
    import ray
    from ray.util.placement_group import placement_group
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    log("Connected to Ray cluster: %s" % ray.cluster_resources())
    group = placement_group([{"GPU": 1.0}] * tp_size, strategy="PACK" if tp_size == 1 else "SPREAD")
    waited = 0
    while True:
        ready, _pending = ray.wait([group.ready()], timeout=10)
        if ready:
            break
        waited += 10
        log("Waiting for creating a placement group of specs for %d seconds. specs=%s. "
            "Check `ray status` and `ray list nodes` to see if you have enough resources, "
            "and make sure the IP addresses used by ray cluster are the same as "
            "VLLM_HOST_IP environment variable specified in each node if you are "
            "running on a multi-node." % (waited, [{"GPU": 1.0}] * tp_size))
    log("Placement group ready: %d GPU bundle(s)" % tp_size)
    WORKERS.extend(start_workers(group, tp_size))
    return group


WORKERS = []  # the actors live as long as this process, like vLLM's workers
GPU_DEVICE = os.environ.get("LAGUNA_STANDIN_GPU_DEVICE", "/opt/laguna-standin/dev/nvidia0")


def start_workers(group, tp_size):
    """One actor per bundle, named like vLLM's, holding the stand-in GPU (a flock: its CUDA context)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    # vLLM's own options: the bundle holds only the GPU.
    @ray.remote(num_cpus=0, num_gpus=1)
    class RayWorkerWrapper:
        def __init__(self, device):
            import fcntl
            self.gpu = open(device, "rb") if os.path.exists(device) else None
            if self.gpu:
                fcntl.flock(self.gpu, fcntl.LOCK_SH)

        def node(self):
            return ray.util.get_node_ip_address(), os.getpid(), self.gpu is not None

    workers = [RayWorkerWrapper.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=rank)).remote(GPU_DEVICE) for rank in range(tp_size)]
    for rank, (ip, pid, holds) in enumerate(ray.get([w.node.remote() for w in workers], timeout=120)):
        log("Worker rank %d on %s: pid %d%s" % (rank, ip, pid, ", holds the GPU" if holds else ""))
    return workers


class Engine:
    def __init__(self, name, spec, max_model_len):
        self.name = name
        self.spec = spec
        self.max_model_len = max_model_len
        self.rate = float(os.environ.get("LAGUNA_STANDIN_TOKENS_PER_S", "200"))
        self.acceptance = float(os.environ.get("LAGUNA_STANDIN_ACCEPTANCE", "0.75"))
        self.lock = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "prompt": 0, "generation": 0}
        # Timing and acceptance come from the speed model (speed_model.py).
        self.speed = speed_model.SpeedModel(self.spec["num_speculative_tokens"] if self.spec else 0)
        self.counters["accepted_per_pos"] = [0] * self.speed.k

    def steps(self, max_tokens, prompt="", prompt_tokens=0):
        """Token groups as the target would emit them: the prefill's, then one per step."""
        k = self.speed.k
        due = time.monotonic()  # a schedule, so that sleep overheads do not add up
        for wait, group, accepted in self.speed.steps(prompt, prompt_tokens, max_tokens):
            due += wait
            time.sleep(max(0.0, due - time.monotonic()))
            with self.lock:
                if accepted is not None:
                    self.counters["drafts"] += 1
                    self.counters["draft_tokens"] += k
                    self.counters["accepted"] += accepted
                    for pos in range(accepted):
                        self.counters["accepted_per_pos"][pos] += 1
                self.counters["generation"] += len(group)
            yield group

    def metrics(self):
        """/metrics as vLLM 0.25.1 writes it (prometheus_client's text format).

        The same families, types, label names and sample names as vLLM's
        PrometheusStatLogger registers, counters with their `_created` gauges
        (tests/conformance/test_vllm_metrics.py compares them with vLLM's own).
        """
        c, labels = self.counters, {"engine": "0", "model_name": self.name}
        out = []

        def family(name, kind, doc, samples):
            out.append("# HELP %s %s" % (name, doc))
            out.append("# TYPE %s %s" % (name, kind))
            for extra, value in samples:
                label_text = ",".join('%s="%s"' % kv for kv in sorted(dict(labels, **extra).items()))
                out.append("%s{%s} %s" % (name, label_text, repr(float(value))))

        def counter(name, doc, values):
            family(name + "_total", "counter", doc, values)
            family(name + "_created", "gauge", doc, [(extra, self.started) for extra, _value in values])

        family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [({}, c["prompt"])])
        counter("vllm:generation_tokens", "Number of generation tokens processed.", [({}, c["generation"])])
        if self.spec:
            counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [({}, c["drafts"])])
            counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [({}, c["draft_tokens"])])
            counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [({}, c["accepted"])])
            counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                    [({"position": str(pos)}, count) for pos, count in enumerate(c.get("accepted_per_pos", []))])
        return "\n".join(out) + "\n"

    @property
    def started(self):
        if not hasattr(self, "_started"):
            self._started = time.time()
        return self._started


def handler_for(engine, api_tokens=()):
    """The request handler; api_tokens: the keys of api_key_tokens() (none: no key needed)."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def admitted(self):
            """authorized(), or a 401 sent (the request's body read first, for the connection's sake)."""
            path = unquote(urlsplit(self.path).path)
            if authorized(path, self.command, self.headers.get("Authorization"), api_tokens):
                return True
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send(*UNAUTHORIZED)
            return False

        def log_message(self, fmt, *args):
            log("%s - %s" % (self.address_string(), fmt % args))

        def send(self, code, body, ctype="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if not self.admitted():
                return
            if self.path == "/health":
                self.send(200, "", "text/plain")
            elif self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{
                    "id": engine.name, "object": "model", "owned_by": "vllm",
                    "max_model_len": engine.max_model_len}]})
            elif self.path == "/metrics":
                self.send(200, engine.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/version":
                self.send(200, {"version": "0.0.0+laguna.standin"})
            else:
                self.send(404, {"error": "not found"})

        def do_POST(self):
            if not self.admitted():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self.send(400, {"error": "invalid JSON"})
            if self.path in ("/tokenize", "/detokenize"):
                return self.send(*speed_model.tokenizer_endpoint(self.path, req, engine.name, engine.max_model_len))
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                return self.send(404, {"error": "not found"})
            if req.get("model") not in (None, engine.name):
                return self.send(404, {"error": {"message": "The model `%s` does not exist." % req.get("model")}})
            chat = self.path.endswith("chat/completions")
            prompt = speed_model.prompt_text(req, chat)
            prompt_tokens = len(speed_model.prompt_ids(req, chat))
            max_tokens = int(req.get("max_tokens") or 16)
            if speed_model.too_long(prompt_tokens, max_tokens, engine.max_model_len):
                return self.send(*speed_model.too_long(prompt_tokens, max_tokens, engine.max_model_len))
            with engine.lock:
                engine.counters["prompt"] += prompt_tokens
            with_ids = bool(req.get("return_token_ids"))
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            rid, created = "cmpl-standin-%d" % time.time_ns(), int(time.time())
            if not req.get("stream"):
                pieces = [w for group in engine.steps(max_tokens, prompt, prompt_tokens) for w in group]
                text = "".join(pieces)
                finish = "length" if len(pieces) >= max_tokens else "stop"
                usage.update(completion_tokens=len(pieces), total_tokens=prompt_tokens + len(pieces))
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                          if chat else {"index": 0, "text": text, "finish_reason": finish})
                if with_ids:
                    choice["token_ids"] = [speed_model.token_id(w) for w in pieces]
                return self.send(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                                       "created": created, "model": engine.name,
                                       "choices": [choice], "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()

            def event(payload):
                self.wfile.write(("data: %s\n\n" % json.dumps(payload)).encode())
                self.wfile.flush()

            obj = "chat.completion.chunk" if chat else "text_completion"
            for group in engine.steps(max_tokens, prompt, prompt_tokens):
                piece = "".join(group)
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                if with_ids:
                    choice["token_ids"] = [speed_model.token_id(w) for w in group]
                event({"id": rid, "object": obj, "created": created, "model": engine.name, "choices": [choice]})
            if (req.get("stream_options") or {}).get("include_usage"):
                event({"id": rid, "object": obj, "created": created, "model": engine.name,
                       "choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


def serve(args):
    if not os.path.isdir(args.model) or not os.path.isfile(os.path.join(args.model, "config.json")):
        raise SystemExit("ERROR: model %s has no config.json: is it staged?" % args.model)
    spec = None
    if args.speculative_config:
        spec = json.loads(args.speculative_config)
        if spec.get("method") != "dflash" or not os.path.isdir(spec.get("model", "")):
            raise SystemExit("ERROR: speculative config %s: need method dflash and a staged draft" % spec)
        load_draft(spec)
        log_draft_kernel()
    if args.distributed_executor_backend == "ray":
        reserve_gpus(args.tensor_parallel_size * args.pipeline_parallel_size)
    engine = Engine(args.served_model_name or args.model, spec, args.max_model_len)
    log_kv_cache(args.kv_cache_memory_bytes, args.max_model_len)
    tokens = api_key_tokens(args.api_key)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(engine, tokens))
    server.daemon_threads = True
    log("Starting vLLM API server on http://%s:%d" % (args.host, args.port))
    server.serve_forever()


def main(argv=None):
    args = parser().parse_args(argv)
    if args.command == "serve":
        serve(args)
    else:
        print("0.0.0+laguna.standin")


if __name__ == "__main__":
    main()
