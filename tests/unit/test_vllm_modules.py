from ansible_collections.laguna.spark.plugins.module_utils import prometheus, vllm_client
from ansible_collections.laguna.spark.plugins.modules import vllm_bench, vllm_spec_decode_info

METRICS = """# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 60.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 330.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 110.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 100.0
vllm:gpu_cache_usage_perc{engine="0"} NaN
"""


def test_prometheus_sums_label_sets_and_derives_rates():
    totals = prometheus.sums(METRICS)
    assert totals["vllm:spec_decode_num_draft_tokens_total"] == 660.0
    spec = prometheus.spec_decode(totals)
    assert spec["present"] and spec["accepted_tokens"] == 330
    assert spec["acceptance_rate"] == 0.5
    assert spec["mean_acceptance_length"] == 4.0
    assert "vllm:gpu_cache_usage_perc" not in totals


def test_spec_decode_absent():
    spec = prometheus.spec_decode(prometheus.sums("vllm:generation_tokens_total 5\n"))
    assert not spec["present"] and spec["acceptance_rate"] is None


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
