"""`vllm serve` stand-in for the laguna-spark tests.

What it does like vLLM, because the collection depends on it:
  * the same flags (unknown ones are an error, so a typo in the rendered
    command fails the test);
  * loads the DFlash draft through vllm.model_executor.models.laguna_dflash
    with a W4A16-style quant config that has no get_cache_scale, so an
    unpatched install dies with the real AttributeError;
  * with --distributed-executor-backend ray, vLLM 0.25.1's RayExecutorV2
    (vllm/v1/executor/ray_executor_v2.py here): a PACK placement group of one
    GPU bundle per rank, the doubling wait that gives up after 1800 s, the
    ranks driver's node first, one RayWorkerProc actor per rank (run by each
    node's raylet) that gets the `vllm serve` environment the node lacks,
    holds the node's GPU (a flock on the stand-in device file, whose holders
    the nvidia-smi stand-in reports) and runs vLLM's start-up memory check
    (vllm/v1/worker/gpu_worker.py here);
  * when a rank dies (its raylet killed), what vLLM does: the worker monitor
    shuts the executor down, the engine is dead, /health answers 503, the
    API server's watchdog stops the server within 5 s and the process exits
    with status 0 (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps it up);
  * a failed start (the placement group never ready, a rank short of
    memory) ends as vLLM's does: "EngineCore failed to start.", the cause,
    "Engine core initialization failed. ..." and exit status 1;
  * vLLM's log lines the collection and its tests read: the KV pool, the
    draft's kernel, "Initial free memory ... reserved ... for KV Cache" per
    rank and the periodic "SpecDecoding metrics: ..." line;
  * serves /v1/models, /v1/chat/completions (also streaming, with usage),
    /v1/completions, /health and /metrics with the token and spec-decode
    counters, the scheduler's gauges (running and waiting requests, KV-cache
    usage) and the histograms of time to first token, inter-token latency
    and tokens per engine step, named, typed and labelled as vLLM's
    PrometheusStatLogger registers them (tests/conformance/test_vllm_metrics.py);
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
k-token draft (0 stands for a mismatched draft; LAGUNA_STANDIN_ACCEPTANCE_FILE
changes it while the server runs, speed_model.py).
A test's injection: while the file LAGUNA_STANDIN_WEDGE_FILE names this
process's PID, its engine is wedged, as vLLM's is in a collective that never
returns: /health, /v1/models and /metrics answer, no completion finishes and
no token is generated; a new process (a restart) is not wedged.
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
from vllm.v1.spec_decode.metrics import SpecDecodingLogging, log_stats_interval
from vllm.v1.worker import gpu_worker


def log(msg, where="standin.py:1", level="INFO"):
    """A log line in vLLM's format: "INFO 12-03 06:43:10 [file.py:line] message"."""
    sys.stderr.write("%s %s [%s] %s\n" % (level, time.strftime("%m-%d %H:%M:%S"), where, msg))
    sys.stderr.flush()


def say(text):
    """Lines as they are (a traceback's, uvicorn's)."""
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


# Where vLLM logs the lines below: "<file>:<line of the logger call>" (checked by
# tests/conformance/test_vllm_ray_executor.py).
LOG_SITES = {
    "engine_failed_to_start": "core.py:1231",
    "engine_fatal": "core.py:1233",
    "output_handler_failed": "async_llm.py:704",
    "kv_cache_reserved": "gpu_worker.py:459",
    "spec_decoding": "metrics.py:120",
}
# vllm/v1/engine/exceptions.py EngineDeadError's message; core.py's EXECUTOR_FAILED error.
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
EXECUTOR_FAILED = "Executor failed."
# What the API server answers a request once the engine is dead (create_error_response(EngineDeadError())).
ENGINE_DEAD_RESPONSE = (500, {"error": {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError",
                                        "param": None, "code": 500}})
# entrypoints/launcher.py watchdog_loop: VLLM_WATCHDOG_TIME_S.
WATCHDOG_TIME_S = 5.0
# uvicorn's lines as the server stops (uvicorn/server.py, uvicorn/lifespan/on.py).
UVICORN_SHUTDOWN = ("INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                    "INFO:     Application shutdown complete.", "INFO:     Finished server process [%d]")
ENGINE_INIT_FAILED = ("RuntimeError: Engine core initialization failed. See root cause above. "
                      "Failed core proc(s): {'EngineCore': 1}")


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


def worker_log_prefix(rank, driver_ip):
    """Ray's prefix on a line a rank logs, as the driver prints it: "(RayWorkerProc pid=N, ip=X) "
    (no ip on the driver's node; ray/_private/worker.py print_worker_logs)."""
    ip = "" if rank["ip"] == driver_ip else ", ip=%s" % rank["ip"]
    return "(RayWorkerProc pid=%d%s) " % (rank["pid"], ip)


def log_kv_cache_reserved(ranks, kv_cache_memory_bytes, driver_ip=None):
    """Each rank's "Initial free memory ... reserved ... for KV Cache" line (with --kv-cache-memory-bytes)."""
    if not kv_cache_memory_bytes:
        return
    for rank in ranks:
        prefix = worker_log_prefix(rank, driver_ip) if "pid" in rank else ""
        say(prefix + "INFO %s [%s] %s" % (time.strftime("%m-%d %H:%M:%S"), LOG_SITES["kv_cache_reserved"],
                                          gpu_worker.kv_cache_reserved_message(rank["free_memory"],
                                                                               kv_cache_memory_bytes)))


def start_ray_executor(args, gpu_memory_utilization):
    """RayExecutorV2 started: (executor, what each rank reported, the driver's ip)."""
    import ray
    from vllm.v1.executor.ray_executor_v2 import RayExecutorV2
    executor = RayExecutorV2(args.tensor_parallel_size * args.pipeline_parallel_size, args.tensor_parallel_size,
                             args.pipeline_parallel_size, gpu_memory_utilization)
    ranks = executor.start()
    driver_ip = ray.util.get_node_ip_address()
    for number, rank in enumerate(ranks):
        log("Worker rank %d on %s: pid %d%s; its environment: %s" % (
            number, rank["ip"], rank["pid"], ", holds the GPU" if rank["holds_gpu"] else "", rank["state"]))
    return executor, ranks, driver_ip


def check_local_memory(gpu_memory_utilization):
    """The memory check of a rank of the mp/uni backends, on this node: [its figures]."""
    snap = gpu_worker.snapshot()
    gpu_worker.request_memory(snap, gpu_memory_utilization)
    return [{"free_memory": snap["free_memory"], "total_memory": snap["total_memory"]}]


def engine_failed_to_start(exc):
    """vLLM's end of a failed start: EngineCore's error and its cause, the API server's, status 1."""
    log("EngineCore failed to start.", LOG_SITES["engine_failed_to_start"], "ERROR")
    say("Traceback (most recent call last):")
    text = str(exc)
    name = type(exc).__name__
    say(text if text.startswith(("ray::", name)) else "%s: %s" % (name, text))
    raise SystemExit(ENGINE_INIT_FAILED)


# vLLM 0.25.1's histogram buckets (v1/metrics/loggers.py, PrometheusStatLogger).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class Histogram:
    """Observations in cumulative buckets, as prometheus_client keeps them."""

    def __init__(self, buckets):
        self.buckets = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last: +Inf
        self.total = 0.0

    def observe(self, value):
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value

    def cumulative(self):
        """[(le text, count)] as the exposition writes them, +Inf last."""
        out, running = [], 0
        for bound, count in zip([repr(b) for b in self.buckets] + ["+Inf"], self.counts):
            running += count
            out.append((bound, running))
        return out


class Engine:
    def __init__(self, name, spec, max_model_len, kv_cache_memory_bytes=None):
        self.name = name
        self.spec = spec
        self.max_model_len = max_model_len
        # The KV pool the recipe's log line reports for this many bytes (log_kv_cache()).
        self.kv_tokens = int(round((kv_cache_memory_bytes or 5368709120) * RECIPE_KV_TOKENS_PER_BYTE))
        self.rate = float(os.environ.get("LAGUNA_STANDIN_TOKENS_PER_S", "200"))
        self.acceptance = float(os.environ.get("LAGUNA_STANDIN_ACCEPTANCE", "0.75"))
        self.lock = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "prompt": 0, "generation": 0}
        # Timing and acceptance come from the speed model (speed_model.py).
        self.speed = speed_model.SpeedModel(self.spec["num_speculative_tokens"] if self.spec else 0)
        self.counters["accepted_per_pos"] = [0] * self.speed.k
        self.spec_logging = SpecDecodingLogging()
        self.dead = False
        self.wedge_file = os.environ.get("LAGUNA_STANDIN_WEDGE_FILE") or None
        # The scheduler's state and the request histograms of /metrics.
        self.running = 0
        self.kv_in_use = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)

    def wedged(self):
        """Whether the wedge file names this process (read at each request)."""
        if not self.wedge_file:
            return False
        try:
            with open(self.wedge_file) as handle:
                return str(os.getpid()) in handle.read().split()
        except OSError:
            return False

    @property
    def errored(self):
        """AsyncLLM.errored: the engine core is dead."""
        return self.dead

    def executor_failed(self):
        """The executor's failure callback: EngineCore raises and dies, the output handler with it."""
        log("EngineCore encountered a fatal error.", LOG_SITES["engine_fatal"], "ERROR")
        say("Traceback (most recent call last):\nRuntimeError: %s" % EXECUTOR_FAILED)
        log("AsyncLLM output_handler failed.", LOG_SITES["output_handler_failed"], "ERROR")
        say("Traceback (most recent call last):\nvllm.v1.engine.exceptions.EngineDeadError: %s" % ENGINE_DEAD_MESSAGE)
        self.dead = True

    def log_stats(self):
        """do_log_stats(): the "SpecDecoding metrics" line when drafts ran since the last one."""
        message = self.spec_logging.message()
        if message:
            log(message, LOG_SITES["spec_decoding"])

    def steps(self, max_tokens, prompt="", prompt_tokens=0):
        """Token groups as the target would emit them: the prefill's, then one per step.

        While it runs the request counts as running and holds its tokens in
        the KV pool; each group is observed as vLLM's scheduler stats are:
        the first one's delay as the time to first token, each later one's
        as an inter-token latency, every step's tokens (the prefill's with
        the prompt) as one engine step's."""
        k = self.speed.k
        start = due = time.monotonic()  # a schedule, so that sleep overheads do not add up
        last, held = None, prompt_tokens
        with self.lock:
            self.running += 1
            self.kv_in_use += held
        try:
            for wait, group, accepted in self.speed.steps(prompt, prompt_tokens, max_tokens):
                due += wait
                time.sleep(max(0.0, due - time.monotonic()))
                now = time.monotonic()
                with self.lock:
                    if accepted is not None:
                        self.counters["drafts"] += 1
                        self.counters["draft_tokens"] += k
                        self.counters["accepted"] += accepted
                        for pos in range(accepted):
                            self.counters["accepted_per_pos"][pos] += 1
                        self.spec_logging.observe(1, k, accepted, [1 if pos < accepted else 0 for pos in range(k)])
                    self.counters["generation"] += len(group)
                    if last is None:
                        self.ttft.observe(now - start)
                        self.iteration_tokens.observe(prompt_tokens + len(group))
                    else:
                        self.itl.observe(now - last)
                        self.iteration_tokens.observe(len(group))
                    self.kv_in_use += len(group)
                    held += len(group)
                last = now
                yield group
        finally:
            with self.lock:
                self.running -= 1
                self.kv_in_use -= held

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

        def gauge(name, doc, value):
            family(name, "gauge", doc, [({}, value)])

        def histogram(name, doc, hist):
            out.append("# HELP %s %s" % (name, doc))
            out.append("# TYPE %s histogram" % name)
            text = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
            for bound, count in hist.cumulative():
                out.append('%s_bucket{%s,le="%s"} %s' % (name, text, bound, repr(float(count))))
            out.append("%s_count{%s} %s" % (name, text, repr(float(sum(hist.counts)))))
            out.append("%s_sum{%s} %s" % (name, text, repr(float(hist.total))))
            family(name + "_created", "gauge", doc, [({}, self.started)])

        with self.lock:
            running, kv_in_use = self.running, self.kv_in_use
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
              min(1.0, kv_in_use / float(self.kv_tokens)) if self.kv_tokens else 0.0)
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [({}, c["prompt"])])
        counter("vllm:generation_tokens", "Number of generation tokens processed.", [({}, c["generation"])])
        if self.spec:
            counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [({}, c["drafts"])])
            counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [({}, c["draft_tokens"])])
            counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [({}, c["accepted"])])
            counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                    [({"position": str(pos)}, count) for pos, count in enumerate(c.get("accepted_per_pos", []))])
        histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                  self.iteration_tokens)
        histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
        histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
        return "\n".join(out) + "\n"

    @property
    def started(self):
        if not hasattr(self, "_started"):
            self._started = time.time()
        return self._started


def handler_for(engine, api_tokens=(), terminate_if_errored=None):
    """The request handler; api_tokens: the keys of api_key_tokens() (none: no key needed);
    terminate_if_errored: called when a request finds the engine dead (vLLM's
    engine_error_handler stops the server at once then)."""
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
                # vLLM's health(): 503 once the engine core is dead
                self.send(503 if engine.errored else 200, "", "text/plain")
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
            if engine.errored:
                if terminate_if_errored:
                    terminate_if_errored()
                return self.send(*ENGINE_DEAD_RESPONSE)
            while engine.wedged():  # no step ends, so nothing answers and no token counts
                time.sleep(0.2)
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


class ApiServer:
    """The HTTP server and vLLM's watchdog (entrypoints/launcher.py): every WATCHDOG_TIME_S
    seconds terminate_if_errored() stops the server once the engine is dead, unless
    VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is set; serve() then returns, and so does `vllm serve`."""

    def __init__(self, engine, host, port, api_tokens=(), environ=None):
        environ = os.environ if environ is None else environ
        self.engine = engine
        self.keep_alive = bool(int(environ.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0")))
        self.should_exit = threading.Event()
        self.server = ThreadingHTTPServer((host, port), handler_for(engine, api_tokens, self.terminate_if_errored))
        self.server.daemon_threads = True

    def terminate_if_errored(self):
        if not self.keep_alive and self.engine.errored and not self.should_exit.is_set():
            self.should_exit.set()
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def watchdog_loop(self, period=WATCHDOG_TIME_S):
        while not self.should_exit.wait(period):
            self.terminate_if_errored()

    def serve(self):
        threading.Thread(target=self.watchdog_loop, daemon=True, name="watchdog").start()
        self.server.serve_forever()
        self.should_exit.set()
        self.server.server_close()
        for line in UVICORN_SHUTDOWN[:3]:
            say(line)
        say(UVICORN_SHUTDOWN[3] % os.getpid())


def stats_loop(engine, interval):
    while True:
        time.sleep(interval)
        engine.log_stats()


def serve(args):
    if not os.path.isdir(args.model) or not os.path.isfile(os.path.join(args.model, "config.json")):
        raise SystemExit("ERROR: model %s has no config.json: is it staged?" % args.model)
    utilization = args.gpu_memory_utilization
    if utilization is None:
        utilization = gpu_worker.DEFAULT_GPU_MEMORY_UTILIZATION
    if not 0 < utilization <= 1:  # CacheConfig: Field(gt=0, le=1)
        raise SystemExit("ERROR: gpu_memory_utilization %s: it must be > 0 and <= 1" % utilization)
    spec = None
    if args.speculative_config:
        spec = json.loads(args.speculative_config)
        if spec.get("method") != "dflash" or not os.path.isdir(spec.get("model", "")):
            raise SystemExit("ERROR: speculative config %s: need method dflash and a staged draft" % spec)
        load_draft(spec)
        log_draft_kernel()
    engine = Engine(args.served_model_name or args.model, spec, args.max_model_len, args.kv_cache_memory_bytes)
    executor, driver_ip = None, None
    try:
        if args.distributed_executor_backend == "ray":
            executor, ranks, driver_ip = start_ray_executor(args, utilization)
        else:
            ranks = check_local_memory(utilization)
    except Exception as exc:  # pylint: disable=broad-except
        engine_failed_to_start(exc)
    if executor is not None:
        executor.register_failure_callback(engine.executor_failed)
    log_kv_cache_reserved(ranks, args.kv_cache_memory_bytes, driver_ip)
    log_kv_cache(args.kv_cache_memory_bytes, args.max_model_len)
    server = ApiServer(engine, args.host, args.port, api_key_tokens(args.api_key))
    threading.Thread(target=stats_loop, args=(engine, log_stats_interval()), daemon=True, name="stats").start()
    log("Starting vLLM API server on http://%s:%d" % (args.host, args.port))
    server.serve()
    if executor is not None:
        executor.shutdown()


def main(argv=None):
    args = parser().parse_args(argv)
    if args.command == "serve":
        serve(args)
    else:
        print("0.0.0+laguna.standin")


if __name__ == "__main__":
    main()
