"""The stand-in's speed model and tokenizer, and vllm_bench's figures checked against the speed model."""
import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_client
from ansible_collections.laguna.spark.plugins.modules import vllm_bench
from helpers import standin as standin_vllm
from helpers.constants import MAX_MODEL_LEN, SERVED_MODEL

cli, speed_model = standin_vllm.modules("vllm.entrypoints.cli", "vllm.entrypoints.speed_model")

RECIPE_POS = "0.89,0.76,0.65,0.55,0.48,0.41"
SPEED_VARS = ("LAGUNA_STANDIN_TOKENS_PER_S", "LAGUNA_STANDIN_DRAFT_COST", "LAGUNA_STANDIN_ACCEPTANCE_PER_POS",
              "LAGUNA_STANDIN_ACCEPTANCE", "LAGUNA_STANDIN_PREFILL_TOKENS_PER_S", "LAGUNA_STANDIN_LOSSY")


@pytest.fixture
def standin(monkeypatch, http_server):
    """start(k, max_model_len=MAX_MODEL_LEN, **env) -> (base URL, engine) of an in-process stand-in."""
    def start(k, max_model_len=MAX_MODEL_LEN, **env):
        for key in SPEED_VARS:
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv("LAGUNA_STANDIN_" + key, str(value))
        engine = standin_vllm.engine(SERVED_MODEL, k, max_model_len)
        return http_server(cli.handler_for(engine)), engine

    return start


def test_per_position_probabilities():
    assert speed_model.per_position(4, acceptance=0.5) == [1.0, 1.0, 0.0, 0.0]
    assert speed_model.per_position(2, RECIPE_POS.split(",")) == [0.89, 0.76]
    longer = speed_model.per_position(8, RECIPE_POS.split(","))
    assert longer[:6] == [0.89, 0.76, 0.65, 0.55, 0.48, 0.41]
    assert longer[6] == pytest.approx(0.41 * 0.41 / 0.48) and longer[7] == pytest.approx(longer[6] * 0.41 / 0.48)
    assert speed_model.per_position(3, ["0.5", "0.9", "0.2"]) == [0.5, 0.5, 0.2]  # made non-increasing
    assert speed_model.per_position(0, RECIPE_POS.split(",")) == []


def test_acceptance_draws_converge_to_the_probabilities():
    model = speed_model.SpeedModel(6, {"LAGUNA_STANDIN_ACCEPTANCE_PER_POS": RECIPE_POS})
    counts = [0] * 6
    for _attempt in range(3000):
        for pos in range(model.accepted_this_step()):
            counts[pos] += 1
    assert [c / 3000.0 for c in counts] == pytest.approx([0.89, 0.76, 0.65, 0.55, 0.48, 0.41], abs=0.005)
    expected = model.expected()
    assert expected["accepted_per_draft"] == pytest.approx(3.74)
    assert expected["acceptance_rate"] == pytest.approx(3.74 / 6)
    assert expected["step_s"] == pytest.approx((1 + 0.177 * 6) / 200.0)


def test_the_recipes_shape_in_the_speed_model():
    # At 26.5 tok/s without the draft and a draft cost of 0.177 of a step per
    # draft token, the recipe's per-position acceptance gives ~60.9 at k=6.
    env = {"LAGUNA_STANDIN_TOKENS_PER_S": "26.5", "LAGUNA_STANDIN_ACCEPTANCE_PER_POS": RECIPE_POS}
    rates = {k: speed_model.SpeedModel(k, env).expected()["decode_tok_s"] for k in (0, 2, 4, 6, 8)}
    assert rates[0] == pytest.approx(26.5) and rates[6] == pytest.approx(60.9, abs=0.1)
    assert max(rates, key=rates.get) == 6


def test_tokenize_and_detokenize_like_vllm(standin):
    url, _engine = standin(6, max_model_len=4096)
    text = "def f(x):\n        return x + 1  # twelve"
    raw = vllm_client.tokenize(url, SERVED_MODEL, prompt=text, add_special_tokens=False)
    assert set(raw) == {"count", "max_model_len", "tokens", "token_strs"}
    assert raw["count"] == len(raw["tokens"]) and raw["max_model_len"] == 4096
    with_bos = vllm_client.tokenize(url, SERVED_MODEL, prompt=text)
    assert with_bos["tokens"] == [speed_model.SPECIAL["<s>"]] + raw["tokens"]
    chat = vllm_client.tokenize(url, SERVED_MODEL, messages=vllm_client.user(text))
    assert chat["count"] == raw["count"] + 4  # BOS, role, end, assistant
    assert vllm_client.detokenize(url, SERVED_MODEL, raw["tokens"]) == text
    assert vllm_client.detokenize(url, SERVED_MODEL, raw["tokens"][:5]) == "def f(x"
    with pytest.raises(vllm_client.ServerError, match="The model `other` does not exist"):
        vllm_client.tokenize(url, "other", prompt="x")


@pytest.mark.parametrize("target", [64, 2048, 5000])
def test_exact_prompts_have_the_target_count(standin, target):
    url, _engine = standin(6)
    prompt = vllm_client.exact_prompt(url, SERVED_MODEL, target, salt="Run 1.\n")
    assert prompt["exact"] and prompt["prompt_tokens"] == target
    assert prompt["content"].startswith("Run 1.\nReview the following Python module")
    answer = vllm_client.post_json(url + "/v1/chat/completions", {
        "messages": vllm_client.user(prompt["content"]), "max_tokens": 2})
    assert answer["usage"]["prompt_tokens"] == target


def test_decode_figures_match_the_speed_model(standin, run_module):
    url, engine = standin(6, TOKENS_PER_S=100, ACCEPTANCE_PER_POS=RECIPE_POS)
    expected = engine.speed.expected()
    result = run_module(vllm_bench, {"url": url, "prompt_tokens": 512, "max_tokens": 100, "runs": 3, "warmup": 1})
    assert not result.failed, result.get("msg")
    assert result["server_version"] == "0.0.0+laguna.standin" and result["prompt_tokens"] == 512
    spec = result["spec"]
    assert spec["drafts"] >= 3 * 18 and spec["draft_tokens"] == 6 * spec["drafts"]
    # The counters of the measured window alone, against the model's probabilities.
    assert spec["per_position"] == pytest.approx(expected["per_position"], abs=0.07)
    assert spec["acceptance_rate"] == pytest.approx(expected["acceptance_rate"], abs=0.04)
    assert spec["accepted_per_draft"] == pytest.approx(sum(spec["per_position"]))
    stats = result["decode_tok_s_stats"]
    assert stats["n"] == 3 and stats["min"] <= stats["median"] <= stats["max"]
    # tok/s = tokens per step / step time, per the recipe's formula on the stream.
    measured_rate = (1 + spec["accepted_per_draft"]) / expected["step_s"]
    assert stats["median"] == pytest.approx(measured_rate, rel=0.1)


def test_baseline_decode_and_ttft_match_the_speed_model(standin, run_module):
    url, _engine = standin(0, TOKENS_PER_S=100, PREFILL_TOKENS_PER_S=20000)
    result = run_module(vllm_bench, {"url": url, "prompt_tokens": 256, "max_tokens": 50, "runs": 2, "warmup": 0})
    assert result["decode_tok_s"] == pytest.approx(100, rel=0.1)
    assert result["acceptance_rate"] is None and not result["spec"]["present"]
    ttft = run_module(vllm_bench, {"url": url, "measure": "ttft", "prompt_tokens": 4000, "max_tokens": 4, "runs": 2})
    assert ttft["prompt_tokens"] == 4000 and ttft["prompt_exact"] and len(ttft["runs"]) == 2
    assert ttft["ttft_s_stats"]["median"] == pytest.approx(4000 / 20000.0, abs=0.05)


def test_ttft_beyond_the_context_is_skipped(standin, run_module):
    url, _engine = standin(6, max_model_len=4096)
    result = run_module(vllm_bench, {"url": url, "measure": "ttft", "prompt_tokens": 4090, "max_tokens": 8})
    assert result["skipped"] and "exceed the served context of 4096 tokens" in result["msg"]
    # The server refuses such a request as vLLM does, and the module says why.
    result = run_module(vllm_bench, {"url": url, "measure": "ttft", "prompt_tokens": 4090, "max_tokens": 8,
                                     "exact_prompt": False})
    assert result["skipped"]
    too_long = vllm_client.user(vllm_client.code_prompt(5000))
    with pytest.raises(vllm_client.ServerError, match="maximum context length is 4096 tokens"):
        vllm_client.post_json(url + "/v1/chat/completions", {"messages": too_long, "max_tokens": 8})


def test_greedy_outputs_are_identical_with_and_without_the_draft(standin, run_module):
    prompts = ["Write a CSV parser.", "Implement an LRU cache."]
    args = {"measure": "greedy", "prompts": prompts, "max_tokens": 24}
    base_url, _engine = standin(0)
    base = run_module(vllm_bench, dict(args, url=base_url))["outputs"]
    draft_url, _engine = standin(6, ACCEPTANCE_PER_POS=RECIPE_POS)
    draft = run_module(vllm_bench, dict(args, url=draft_url))["outputs"]
    assert [len(o["token_ids"]) for o in base] == [24, 24]
    assert base[0]["token_ids"] != base[1]["token_ids"]  # the output depends on the prompt
    assert [o["token_ids"] for o in draft] == [o["token_ids"] for o in base]
    lossy_url, _engine = standin(6, LOSSY=1)
    lossy = run_module(vllm_bench, dict(args, url=lossy_url))["outputs"]
    assert lossy[0]["token_ids"][:3] == base[0]["token_ids"][:3] and lossy[0]["token_ids"][3] != base[0]["token_ids"][3]


def test_greedy_needs_prompts_and_bounds_are_checked(run_module):
    assert "needs prompts" in run_module(vllm_bench, {"measure": "greedy"})["msg"]
    assert "runs must be at least 1" in run_module(vllm_bench, {"runs": 0})["msg"]
    result = run_module(vllm_bench, {"url": "http://127.0.0.1:9", "timeout": 2})
    assert result.failed and "Benchmark (decode) against http://127.0.0.1:9 failed" in result["msg"]
