"""HTTP servers for the tests: a request handler class served on 127.0.0.1 (a free port) from a daemon thread.

    with Servers() as servers:
        base = servers.start(Handler)   # "http://127.0.0.1:<port>"

tests/unit/conftest.py's http_server fixture is ``start`` of a Servers that the test's end closes.
"""

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """A request handler that logs nothing; answer() sends a whole response."""

    def answer(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


class Servers:
    """start(handler) -> the base URL of the handler class served from a daemon thread; close() (or the end of a
    with block) stops every one."""

    def __init__(self):
        self.servers = []

    def start(self, handler):
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1]

    def close(self):
        while self.servers:
            server = self.servers.pop()
            server.shutdown()
            server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


@contextlib.contextmanager
def hung_port():
    """A port on 127.0.0.1 whose socket accepts and never answers (the kernel completes the handshake from the
    listen backlog, nobody reads): what a SIGSTOPped server looks like."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


class VllmApi(Handler):
    """/health, /metrics (the generated-token counter) and /v1/chat/completions
    as vLLM answers them; ``mode``: answer (with ``content``), error (a 500
    with vLLM's error body), wedged (nothing answers and the counter stands
    still) or busy (nothing answers while the counter moves)."""
    mode, content, bodies, tokens = "answer", "Paris", None, None

    def do_GET(self):  # noqa: N802
        if self.path == "/metrics":
            if self.mode == "busy":
                self.tokens[0] += 7
            body = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name=\"m\"} %d\n"
            return self.answer(200, (body % self.tokens[0]).encode())
        self.answer(200)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append((self.path, body, self.headers.get("Authorization")))
        if self.mode in ("wedged", "busy"):
            time.sleep(3)  # past the client's timeout; it has gone, so nothing is sent
            return None
        if self.mode == "error":
            return self.answer(500, json.dumps({"error": {"message": "EngineCore encountered an issue"}}).encode())
        self.answer(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": self.content}}],
                                     "usage": {"completion_tokens": 2}}).encode())


def vllm_api(mode="answer", content="Paris", bodies=None):
    """A VllmApi handler class in ``mode`` answering ``content``; each POST is appended to ``bodies``."""
    return type("VllmApi", (VllmApi,), {"mode": mode, "content": content,
                                        "bodies": [] if bodies is None else bodies, "tokens": [100]})
