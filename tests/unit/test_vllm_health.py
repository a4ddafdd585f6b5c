"""vllm_health against real sockets on 127.0.0.1: answering, refusing, hung; the API key."""

import json

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health
from ansible_collections.laguna.spark.plugins.modules import vllm_health as vllm_health_module
from helpers import free_port
from helpers.servers import Handler, hung_port

KEY = "sk-laguna-health-51c2"


class _Ok(Handler):
    code = 200
    key = None  # set: answers 401 unless the request carries it (a proxy guarding /health)
    seen = None

    def do_GET(self):  # noqa: N802
        if self.seen is not None:
            self.seen.append(self.headers.get("Authorization"))
        code = self.code
        if self.key and self.headers.get("Authorization") != "Bearer " + self.key:
            code = 401
        self.answer(code)


@pytest.fixture
def server(http_server):
    def start(code=200, key=None, seen=None):
        return http_server(type("H", (_Ok,), {"code": code, "key": key, "seen": seen})) + "/health"

    return start


def test_an_answering_server_is_healthy(server):
    state, status = vllm_health.probe(server(), 5)[:2]
    assert (state, status) == ("healthy", 200)


def test_a_500_is_unhealthy_not_hung(server):
    state, status = vllm_health.probe(server(500), 5)[:2]
    assert (state, status) == ("unhealthy", 500)


def test_nothing_listening_is_down():
    state, _status, seconds, _detail = vllm_health.probe("http://127.0.0.1:%d/health" % free_port(), 5)
    assert state == "down" and seconds < 5


def test_a_socket_that_accepts_and_never_answers_is_hung():
    with hung_port() as port:  # what a SIGSTOPped vLLM looks like
        state, status, seconds, detail = vllm_health.probe("http://127.0.0.1:%d/health" % port, 1)
    assert state == "hung", detail
    assert status is None and 1 <= seconds < 5


def test_the_key_goes_as_a_bearer_token_and_a_401_names_the_fix(server):
    seen = []
    url = server(key=KEY, seen=seen)
    state, status, _seconds, detail = vllm_health.probe(url, 5)
    assert (state, status) == ("unhealthy", 401)
    assert "401 Unauthorized" in detail and "set vllm_serve_api_key" in detail
    assert vllm_health.probe(url, 5, api_key=KEY)[:2] == ("healthy", 200)
    assert seen == [None, "Bearer " + KEY]


def test_the_module_passes_the_key_and_never_returns_it(server, run_module):
    seen = []
    base = server(key=KEY, seen=seen).rsplit("/health", 1)[0]
    result = run_module(vllm_health_module, {"url": base, "timeout": 5})
    assert result["state"] == "unhealthy" and "set vllm_serve_api_key" in result["detail"]
    result = run_module(vllm_health_module, {"url": base, "timeout": 5, "api_key": KEY})
    assert (result["state"], result["status"]) == ("healthy", 200) and seen[-1] == "Bearer " + KEY
    assert KEY not in json.dumps(result)
    wrong = run_module(vllm_health_module, {"url": base, "timeout": 5, "api_key": "sk-wrong"})
    assert wrong["status"] == 401 and "refused the API key" in wrong["detail"] and "sk-wrong" not in json.dumps(wrong)
