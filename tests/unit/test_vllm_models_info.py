"""vllm_models_info (vllm_health.models) against real sockets, and the message of
vllm_serve's verify when the API never came up (vllm_health.down_message, filter vllm_api_down)."""

import json

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_health, vllm_log
from ansible_collections.laguna.spark.plugins.modules import vllm_models_info
from helpers import free_port
from helpers.constants import MAX_MODEL_LEN, SERVED_MODEL
from helpers.filters import run_filter
from helpers.servers import Handler, hung_port

KEY = "sk-laguna-models-7d1e"
LISTING = {"object": "list", "data": [{"id": SERVED_MODEL, "object": "model", "max_model_len": MAX_MODEL_LEN}]}
# vLLM 0.25.1's line (vllm/v1/executor/ray_utils.py) as journald's cat output shows it.
PG_LINE = ("INFO 12-03 06:43:10 [ray_utils.py:467] Waiting for creating a placement group of specs for 10 seconds. "
           "specs=[{'GPU': 1.0, 'node:10.89.77.11': 0.001}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes`")


class _Models(Handler):
    code, body, key = 200, json.dumps(LISTING).encode(), None

    def do_GET(self):  # noqa: N802
        code, body = self.code, self.body
        if self.path != "/v1/models":
            code, body = 404, b"{}"
        if self.key and self.headers.get("Authorization") != "Bearer " + self.key:
            code, body = 401, b'{"error": "Unauthorized"}'
        self.answer(code, body)


@pytest.fixture
def server(http_server):
    def start(code=200, body=None, key=None):
        attrs = {"code": code, "key": key}
        if body is not None:
            attrs["body"] = body
        return http_server(type("H", (_Models,), attrs))

    return start


def test_a_server_listing_its_models_is_up_with_their_ids(server):
    assert vllm_health.models(server() + "/", 5) == {"up": True, "status": 200, "models": [SERVED_MODEL],
                                                     "detail": "HTTP 200"}


def test_nothing_listening_is_down_not_an_error():
    found = vllm_health.models("http://127.0.0.1:%d" % free_port(), 5)
    assert (found["up"], found["status"], found["models"]) == (False, -1, [])
    assert "refused" in found["detail"].lower()


def test_a_server_that_accepts_and_never_answers_is_down_after_the_timeout():
    with hung_port() as port:
        found = vllm_health.models("http://127.0.0.1:%d" % port, 1)
    assert (found["up"], found["status"]) == (False, -1) and "timed out" in found["detail"]


def test_another_status_or_a_body_that_is_no_model_list(server):
    assert vllm_health.models(server(code=503, body=b"loading"), 5) == {
        "up": False, "status": 503, "models": [], "detail": "HTTP 503: Service Unavailable"}
    # 200 is up (the API answers); what it serves is then judged by the caller.
    odd = vllm_health.models(server(body=b"<html>"), 5)
    assert (odd["up"], odd["models"]) == (True, []) and "not a model list" in odd["detail"]


def test_the_key_goes_as_a_bearer_token_and_a_401_names_the_setting(server):
    base = server(key=KEY)
    refused = vllm_health.models(base, 5)
    assert (refused["up"], refused["status"]) == (False, 401) and "set vllm_serve_api_key" in refused["detail"]
    assert vllm_health.models(base, 5, api_key=KEY)["models"] == [SERVED_MODEL]


def test_the_module_reports_down_without_failing_and_never_returns_the_key(server, run_module):
    down = run_module(vllm_models_info, {"url": "http://127.0.0.1:%d" % free_port(), "timeout": 2})
    assert not down.failed and down["up"] is False and down["status"] == -1 and not down["changed"]
    base = server(key=KEY)
    up = run_module(vllm_models_info, {"url": base, "api_key": KEY}, check_mode=True)
    assert up["up"] and up["models"] == [SERVED_MODEL] and up["url"] == base + "/v1/models"
    assert KEY not in json.dumps(up)
    wrong = run_module(vllm_models_info, {"url": base, "api_key": "sk-wrong"})
    assert wrong["status"] == 401 and "refused the API key" in wrong["detail"] and "sk-wrong" not in json.dumps(wrong)
    bad = run_module(vllm_models_info, {"url": base, "timeout": 0})
    assert bad.failed and "timeout must be at least 1 second" in bad["msg"]


def test_the_placement_group_wait_is_read_from_vllms_log_line():
    assert vllm_log.waits_for_placement_group(["INFO starting", PG_LINE])
    assert not vllm_log.waits_for_placement_group(["INFO Waiting for the engine", None])
    assert not vllm_log.waits_for_placement_group([])


def test_the_down_message_names_the_unit_and_the_last_lines():
    lines = ["line %d" % n for n in range(40)]
    message = vllm_health.down_message("http://127.0.0.1:8000", 1800, "laguna-vllm", "failed", "exit-code", lines, 2)
    assert message == ("http://127.0.0.1:8000/v1/models did not answer within 1800s; laguna-vllm is failed/exit-code. "
                       "Last log lines: " + " | ".join("line %d" % n for n in range(25, 40)))


def test_the_down_message_explains_a_placement_group_wait():
    message = vllm_health.down_message("http://127.0.0.1:8000", 20, "laguna-vllm", "active", "success",
                                       ["INFO up", PG_LINE], 2)
    assert message == (
        "http://127.0.0.1:8000/v1/models did not answer within 20s; laguna-vllm is active/success. "
        "vLLM is waiting for a placement group: Ray lacks the GPUs for TP 2. Is a worker raylet down "
        "(lingering off, so it died with its SSH session)? Check `ray status` and rerun --tags linger,ray_cluster. "
        "Last log lines: INFO up | " + PG_LINE)
    assert vllm_health.down_message("u", 2, "unit", "inactive", "success", [], 1).endswith(
        "unit is inactive/success. Last log lines: ")


def test_the_filter_multiplies_the_wait_and_refuses_bad_input():
    unit = {"active_state": "activating", "result": "success", "changed": False}
    message, not_lines, no_unit, bad_delay = run_filter("vllm_api_down", "vllm_api_down", [
        {"args": [["a", "b"]], "kwargs": dict(url="http://127.0.0.1:9", retries="2", delay=1, unit="laguna-vllm",
                                              unit_state=unit, tensor_parallel_size=2)},
        {"args": ["a\nb"], "kwargs": dict(url="u", retries=1, delay=1, unit="x", unit_state=unit, tensor_parallel_size=1)},
        {"args": [[]], "kwargs": dict(url="u", retries=1, delay=1, unit="x", unit_state="?", tensor_parallel_size=1)},
        {"args": [[]], "kwargs": dict(url="u", retries=1, delay="ten", unit="x", unit_state=unit, tensor_parallel_size=1)}])
    assert message == ("http://127.0.0.1:9/v1/models did not answer within 2s; laguna-vllm is activating/success. "
                       "Last log lines: a | b")
    assert "the input must be the journal's lines" in not_lines
    assert "unit_state must be a systemd_user_unit result" in no_unit
    assert "retries and delay must be whole numbers" in bad_delay
