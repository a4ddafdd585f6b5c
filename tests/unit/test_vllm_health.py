"""vllm_health against real sockets on 127.0.0.1: answering, refusing, hung; the API key."""

import json

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health
from ansible_collections.laguna.spark.plugins.modules import vllm_health as vllm_health_module
from helpers import free_port
from helpers.servers import Handler, hung_port, vllm_api

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


# --- The smoke test ---------------------------------------------------------

PROMPT, MODEL = "capital of France? one word", "laguna-s-2.1"


@pytest.fixture
def vllm(http_server):
    def start(mode="answer", content="Paris"):
        bodies = []
        base = http_server(vllm_api(mode, content, bodies))
        return base, bodies

    return start


def test_the_smoke_test_is_the_recipes_request_and_passes_on_the_expected_answer(vllm):
    base, bodies = vllm(content=" paris.")
    found = vllm_health.smoke(base, MODEL, PROMPT, 8, "Paris", 5, api_key=KEY)
    assert (found["state"], found["ok"], found["content"], found["completion_tokens"]) == ("answered", True, " paris.", 2)
    assert found["message"] == "2 tokens: paris."
    # The recipe's curl: one user message, temperature 0, max_tokens; the key as a Bearer token.
    assert bodies == [("/v1/chat/completions", {"model": MODEL, "temperature": 0, "max_tokens": 8,
                                                "messages": [{"role": "user", "content": PROMPT}]}, "Bearer " + KEY)]


def test_a_wrong_or_empty_answer_names_the_answer_and_the_fixes(vllm):
    for content in ("Lyon", "  "):
        found = vllm_health.smoke(vllm(content=content)[0], MODEL, PROMPT, 8, "Paris", 5)
        assert found["state"] == "wrong" and not found["ok"]
        assert ('%s answered %s to "capital of France? one word" at temperature 0, expected "Paris"'
                % (MODEL, json.dumps(content))) in found["message"]
        assert "--tags staging" in found["message"] and "--tags vllm_patch" in found["message"]
    # No expectation: any text passes, none does not.
    assert vllm_health.smoke(vllm(content="Lyon")[0], MODEL, PROMPT, 8, "", 5)["ok"]
    assert not vllm_health.smoke(vllm(content="")[0], MODEL, PROMPT, 8, "", 5)["ok"]


def test_a_server_error_fails_with_vllms_explanation(vllm):
    found = vllm_health.smoke(vllm("error")[0], MODEL, PROMPT, 8, "Paris", 5)
    assert found["state"] == "failed" and "EngineCore encountered an issue" in found["message"]


def test_no_answer_and_no_token_generated_is_a_wedged_engine_and_a_moving_counter_is_busy(vllm):
    wedged = vllm_health.smoke(vllm("wedged")[0], MODEL, PROMPT, 8, "Paris", 1)
    assert wedged["state"] == "hung" and not wedged["ok"] and 1 <= wedged["seconds"] < 3
    assert "got no answer within 1 s; vLLM generated no token meanwhile: its engine is wedged" in wedged["message"]
    busy = vllm_health.smoke(vllm("busy")[0], MODEL, PROMPT, 8, "Paris", 1)
    assert busy["state"] == "busy" and not busy["ok"]
    assert "vLLM generated 7 tokens for other requests meanwhile: it is busy, not hung" in busy["message"]
    # A socket nobody answers (no /metrics either): hung.
    with hung_port() as port:
        assert vllm_health.smoke("http://127.0.0.1:%d" % port, MODEL, PROMPT, 8, "", 1)["state"] == "hung"
    assert vllm_health.smoke("http://127.0.0.1:%d" % free_port(), MODEL, PROMPT, 8, "", 1)["state"] == "down"


def test_the_module_runs_the_smoke_test_only_on_a_healthy_server_and_a_wedged_one_is_hung(vllm, run_module):
    smoke = {"model": MODEL, "prompt": PROMPT, "expect": "Paris"}
    base, bodies = vllm()
    result = run_module(vllm_health_module, {"url": base, "timeout": 5, "smoke": smoke, "api_key": KEY})
    assert result["state"] == "healthy" and result["smoke"]["ok"] and bodies[0][1]["max_tokens"] == 8
    assert KEY not in json.dumps(result)
    wedged = run_module(vllm_health_module, {"url": vllm("wedged")[0], "timeout": 5, "smoke": dict(smoke, timeout=1)})
    assert wedged["state"] == "hung" and wedged["smoke"]["state"] == "hung" and "wedged" in wedged["detail"]
    # A wrong answer is not a hang: the verification names it, nothing restarts.
    wrong = run_module(vllm_health_module, {"url": vllm(content="Lyon")[0], "timeout": 5, "smoke": smoke})
    assert wrong["state"] == "healthy" and wrong["smoke"]["state"] == "wrong"
    with hung_port() as port:
        hung = run_module(vllm_health_module, {"url": "http://127.0.0.1:%d" % port, "timeout": 1, "smoke": smoke})
    assert hung["state"] == "hung" and "smoke" not in hung
