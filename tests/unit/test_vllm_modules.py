import json

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_client
from ansible_collections.laguna.spark.plugins.modules import vllm_bench, vllm_spec_decode_info
from helpers import standin
from helpers.servers import Handler

METRICS = """# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 60.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 330.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 110.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 100.0
vllm:gpu_cache_usage_perc{engine="0"} NaN
"""


def test_measure_stream_formula():
    events = [(1.0, {"choices": [{"delta": {"content": "a"}}]}),
              (1.5, {"choices": [{"delta": {"content": "b c"}}]}),
              (3.0, {"choices": [{"delta": {"content": "d"}}]}),
              (3.0, {"choices": [], "usage": {"completion_tokens": 61, "prompt_tokens": 2048}})]
    result = vllm_client.measure_stream(events, started=0.25)
    assert result["ttft_s"] == 0.75
    assert result["decode_tok_s"] == 60 / 2.0
    assert result["prompt_tokens"] == 2048 and result["text"] == "ab cd"


def test_code_prompt_length():
    prompt = vllm_client.code_prompt(2048)
    assert 2048 * 3.5 * 0.95 < len(prompt) < 2048 * 3.5 * 1.1
    assert prompt.startswith("Review the following Python module")


def test_spec_decode_info_after_warmup(standin_server, run_module):
    url = standin_server(acceptance=0.75)
    vllm_client.post_json(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20})
    result = run_module(vllm_spec_decode_info, {"url": url, "fail_on_zero_acceptance": True})
    assert result["present"] and result["draft_tokens"] > 0
    assert 0.6 < result["acceptance_rate"] < 0.9


def test_zero_acceptance_fails_clearly(standin_server, run_module):
    url = standin_server(acceptance=0.0)
    vllm_client.post_json(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20})
    result = run_module(vllm_spec_decode_info, {"url": url, "fail_on_zero_acceptance": True})
    assert result.failed and "draft does not match the target precision" in result["msg"]


def test_no_speculative_config_fails_only_when_asked(standin_server, run_module):
    url = standin_server(spec=False)
    assert not run_module(vllm_spec_decode_info, {"url": url}).failed
    result = run_module(vllm_spec_decode_info, {"url": url, "fail_on_zero_acceptance": True})
    assert result.failed and "not running with the DFlash" in result["msg"]


def test_unreachable_server(run_module):
    result = run_module(vllm_spec_decode_info, {"url": "http://127.0.0.1:9", "timeout": 2})
    assert result.failed and "Could not read http://127.0.0.1:9/metrics" in result["msg"]


def test_bench_reports_decode_rate_ttft_and_acceptance(standin_server, run_module):
    url = standin_server(acceptance=0.5, rate=2000)
    # 61 tokens: the prefill's, then 15 steps of 1 + round(6 x 0.5) tokens.
    result = run_module(vllm_bench, {"url": url, "prompt_tokens": 256, "max_tokens": 61, "runs": 2, "warmup": 1})
    assert not result["changed"] and result["model"] == "laguna-s-2.1"
    assert len(result["runs"]) == 2 and result["completion_tokens"] == 61
    assert result["prompt_tokens"] == 256 and result["prompt_exact"]
    assert result["decode_tok_s"] > 100 and result["ttft_s"] >= 0
    assert result["acceptance_rate"] == 0.5
    assert result["mean_acceptance_length"] == 4.0
    assert result["draft_tokens"] == 2 * 15 * 6 and result["accepted_tokens"] == 2 * 15 * 3


def test_bench_skips_in_check_mode(run_module):
    result = run_module(vllm_bench, {"url": "http://127.0.0.1:9"}, check_mode=True)
    assert result["skipped"] and not result["changed"]


# --- the API key ---------------------------------------------------------------

KEY = "sk-laguna-unit-7f3a9c"


@pytest.fixture
def keyed_standin(http_server):
    """start(tokens) -> (base URL, [(method, path, Authorization header)]) of a stand-in serving with those keys.

    The stand-in checks the key as vLLM 0.25.1 does (tests/conformance/test_vllm_api_key.py):
    /v1 paths need it, /metrics, /tokenize and /version do not.
    """
    cli, = standin.modules("vllm.entrypoints.cli")

    def start(tokens, spec=True):
        seen = []
        base = cli.handler_for(standin.engine("laguna-s-2.1", 6 if spec else 0), tokens)

        class Recording(base):
            def admitted(self):
                seen.append((self.command, self.path, self.headers.get("Authorization")))
                return base.admitted(self)

        return http_server(Recording), seen

    return start


@pytest.fixture
def guarding_proxy(http_server):
    """start(key) -> base URL of a server that, like a proxy in front of vLLM, wants the key on every path."""
    def start(key):
        class Proxy(Handler):
            def do_GET(self):  # noqa: N802
                if self.headers.get("Authorization") != "Bearer " + key:
                    self.answer(401, b'{"error":"Unauthorized"}')
                else:
                    self.answer(200, METRICS.encode())

        return http_server(Proxy)

    return start


def test_headers_are_built_in_one_place():
    assert vllm_client.headers() == {"Accept": "application/json"}
    assert vllm_client.headers("") == {"Accept": "application/json"}
    assert vllm_client.headers(KEY, "text/event-stream", json_body=True) == {
        "Accept": "text/event-stream", "Content-Type": "application/json", "Authorization": "Bearer " + KEY}


def test_the_client_says_401_and_names_the_fix(keyed_standin):
    url, _seen = keyed_standin([KEY])
    with pytest.raises(vllm_client.Unauthorized, match="401 Unauthorized.*requires an API key; set vllm_serve_api_key"):
        vllm_client.model_info(url)
    with pytest.raises(vllm_client.Unauthorized, match="refused the API key sent; set vllm_serve_api_key") as refused:
        vllm_client.post_json(url + "/v1/chat/completions", {"messages": vllm_client.user("hi")}, api_key="sk-wrong")
    assert "sk-wrong" not in str(refused.value)
    assert vllm_client.model_info(url, api_key=KEY)["id"] == "laguna-s-2.1"
    # vLLM guards /v1, not /tokenize or /metrics.
    assert vllm_client.tokenize(url, "laguna-s-2.1", prompt="x")["count"] >= 1
    assert vllm_client.metric_sums(url) is not None


def test_bench_fails_clearly_without_the_key_and_works_with_it(keyed_standin, run_module):
    url, seen = keyed_standin([KEY])
    args = {"url": url, "prompt_tokens": 128, "max_tokens": 13, "runs": 1, "warmup": 1}
    result = run_module(vllm_bench, args)
    assert result.failed and "401 Unauthorized" in result["msg"] and "set vllm_serve_api_key" in result["msg"]
    result = run_module(vllm_bench, dict(args, api_key="sk-wrong"))
    assert result.failed and "refused the API key" in result["msg"]
    assert "sk-wrong" not in json.dumps(result)
    del seen[:]
    result = run_module(vllm_bench, dict(args, api_key=KEY))
    assert not result.failed, result.get("msg")
    assert result["completion_tokens"] == 13 and result["draft_tokens"] > 0
    assert KEY not in json.dumps(result)
    # Every request carried the key: /v1/models, /version, /tokenize, /detokenize, /metrics, the streams.
    paths = {path for _method, path, _auth in seen}
    assert {"/v1/models", "/version", "/tokenize", "/detokenize", "/metrics", "/v1/chat/completions"} <= paths
    assert {auth for _method, _path, auth in seen} == {"Bearer " + KEY}
    greedy = run_module(vllm_bench, {"url": url, "measure": "greedy", "prompts": ["x"], "max_tokens": 4,
                                     "api_key": KEY})
    assert not greedy.failed and len(greedy["outputs"][0]["token_ids"]) == 4 and KEY not in json.dumps(greedy)


def test_bench_without_a_key_against_a_server_without_one_sends_none(keyed_standin, run_module):
    url, seen = keyed_standin([])
    result = run_module(vllm_bench, {"url": url, "measure": "ttft", "prompt_tokens": 64, "max_tokens": 2,
                                     "runs": 1, "api_key": ""})
    assert not result.failed, result.get("msg")
    assert {auth for _method, _path, auth in seen} == {None}


def test_spec_decode_info_sends_the_key(keyed_standin, guarding_proxy, run_module):
    url, seen = keyed_standin([KEY])
    vllm_client.post_json(url + "/v1/chat/completions", {"messages": vllm_client.user("hi"), "max_tokens": 20},
                          api_key=KEY)
    # vLLM does not guard /metrics: without the key it still reads.
    assert run_module(vllm_spec_decode_info, {"url": url})["draft_tokens"] > 0
    result = run_module(vllm_spec_decode_info, {"url": url, "api_key": KEY, "fail_on_zero_acceptance": True})
    assert not result.failed and result["draft_tokens"] > 0 and seen[-1] == ("GET", "/metrics", "Bearer " + KEY)
    assert KEY not in json.dumps(result)
    # A proxy that guards /metrics: 401 without the key, named.
    proxy = guarding_proxy(KEY)
    result = run_module(vllm_spec_decode_info, {"url": proxy})
    assert result.failed and "401 Unauthorized" in result["msg"] and "set vllm_serve_api_key" in result["msg"]
    result = run_module(vllm_spec_decode_info, {"url": proxy, "api_key": KEY})
    assert not result.failed and result["draft_tokens"] == 660 and KEY not in json.dumps(result)
