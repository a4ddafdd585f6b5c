"""vllm_health against real sockets on 127.0.0.1: answering, refusing, hung."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health


class _Ok(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.code)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    servers = []

    def start(code=200):
        handler = type("H", (_Ok,), {"code": code})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return "http://127.0.0.1:%d/health" % srv.server_address[1]

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_an_answering_server_is_healthy(server):
    state, status = vllm_health.probe(server(), 5)[:2]
    assert (state, status) == ("healthy", 200)


def test_a_500_is_unhealthy_not_hung(server):
    state, status = vllm_health.probe(server(500), 5)[:2]
    assert (state, status) == ("unhealthy", 500)


def test_nothing_listening_is_down():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound then closed: nothing listens on it
    state, _status, seconds, _detail = vllm_health.probe("http://127.0.0.1:%d/health" % port, 5)
    assert state == "down" and seconds < 5


def test_a_socket_that_accepts_and_never_answers_is_hung():
    # What a SIGSTOPped vLLM looks like: the kernel completes the handshake
    # from the listen backlog, nobody reads.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        state, status, seconds, detail = vllm_health.probe(
            "http://127.0.0.1:%d/health" % sock.getsockname()[1], 1)
    finally:
        sock.close()
    assert state == "hung", detail
    assert status is None and 1 <= seconds < 5
