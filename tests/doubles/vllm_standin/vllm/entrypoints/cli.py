"""`vllm serve` stand-in for the laguna-spark tests.

What it does like vLLM, because the collection depends on it:
  * the same flags (unknown ones are an error, so a typo in the rendered
    command fails the test);
  * loads the DFlash draft through vllm.model_executor.models.laguna_dflash
    with a W4A16-style quant config that has no get_cache_scale, so an
    unpatched install dies with the real AttributeError;
  * with --distributed-executor-backend ray, joins the Ray cluster and
    reserves one GPU bundle per tensor-parallel rank in a placement group,
    logging vLLM's "Waiting for creating a placement group" until it fits;
  * serves /v1/models, /v1/chat/completions (also streaming, with usage),
    /v1/completions, /health and /metrics with the spec-decode counters.
What it fakes: the tokens. It streams a fixed code snippet word by word at
LAGUNA_STANDIN_TOKENS_PER_S, accepting LAGUNA_STANDIN_ACCEPTANCE of each
k-token draft (0 stands for a mismatched draft).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def log(msg):
    sys.stderr.write("INFO %s [standin] %s\n" % (time.strftime("%m-%d %H:%M:%S"), msg))
    sys.stderr.flush()


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
    serve.add_argument("--api-key")
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
        ready, _ = ray.wait([group.ready()], timeout=10)
        if ready:
            break
        waited += 10
        log("Waiting for creating a placement group of specs for %d seconds. specs=%s. "
            "Check `ray status` and `ray list nodes` to see if you have enough resources, "
            "and make sure the IP addresses used by ray cluster are the same as "
            "VLLM_HOST_IP environment variable specified in each node if you are "
            "running on a multi-node." % (waited, [{"GPU": 1.0}] * tp_size))
    log("Placement group ready: %d GPU bundle(s)" % tp_size)
    return group


class Engine:
    def __init__(self, name, spec, max_model_len):
        self.name = name
        self.spec = spec
        self.max_model_len = max_model_len
        self.rate = float(os.environ.get("LAGUNA_STANDIN_TOKENS_PER_S", "200"))
        self.acceptance = float(os.environ.get("LAGUNA_STANDIN_ACCEPTANCE", "0.75"))
        self.lock = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "prompt": 0, "generation": 0}

    def steps(self, max_tokens):
        """Token groups as the target would emit them, one group per step."""
        k = self.spec["num_speculative_tokens"] if self.spec else 0
        per_step = 1 + int(round(k * self.acceptance)) if k else 1
        produced = 0
        while produced < max_tokens:
            group = min(per_step, max_tokens - produced)
            with self.lock:
                if k:
                    self.counters["drafts"] += 1
                    self.counters["draft_tokens"] += k
                    self.counters["accepted"] += group - 1
                self.counters["generation"] += group
            time.sleep(group / self.rate)
            yield [REPLY[(produced + i) % len(REPLY)] + " " for i in range(group)]
            produced += group

    def metrics(self):
        c, labels = self.counters, '{engine="0",model_name="%s"}' % self.name
        lines = [
            "# TYPE vllm:prompt_tokens_total counter",
            "vllm:prompt_tokens_total%s %d" % (labels, c["prompt"]),
            "# TYPE vllm:generation_tokens_total counter",
            "vllm:generation_tokens_total%s %d" % (labels, c["generation"]),
        ]
        if self.spec:
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                "vllm:spec_decode_num_drafts_total%s %d" % (labels, c["drafts"]),
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                "vllm:spec_decode_num_draft_tokens_total%s %d" % (labels, c["draft_tokens"]),
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                "vllm:spec_decode_num_accepted_tokens_total%s %d" % (labels, c["accepted"]),
            ]
        return "\n".join(lines) + "\n"


def handler_for(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
            length = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self.send(400, {"error": "invalid JSON"})
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                return self.send(404, {"error": "not found"})
            if req.get("model") not in (None, engine.name):
                return self.send(404, {"error": {"message": "The model `%s` does not exist." % req.get("model")}})
            chat = self.path.endswith("chat/completions")
            prompt = "".join(m.get("content", "") for m in req.get("messages", [])) if chat else str(req.get("prompt", ""))
            prompt_tokens = max(1, int(len(prompt) / 3.5))
            with engine.lock:
                engine.counters["prompt"] += prompt_tokens
            max_tokens = int(req.get("max_tokens") or 16)
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            rid, created = "cmpl-standin-%d" % time.time_ns(), int(time.time())
            if not req.get("stream"):
                text = "".join(w for group in engine.steps(max_tokens) for w in group)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
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
            for group in engine.steps(max_tokens):
                piece = "".join(group)
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
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
    if args.distributed_executor_backend == "ray":
        reserve_gpus(args.tensor_parallel_size * args.pipeline_parallel_size)
    engine = Engine(args.served_model_name or args.model, spec, args.max_model_len)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(engine))
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
