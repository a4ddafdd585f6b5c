"""vllm_serve's verification (API wait, smoke test, acceptance) against a stand-in server."""
from helpers.constants import SERVED_MODEL


def verify(runner, **extravars):
    return runner.include_role("vllm_serve", tasks_from="verify", extravars=dict(
        {"vllm_serve_api_retries": 5, "vllm_serve_api_delay": 1}, **extravars))


def test_a_healthy_endpoint_passes(runner, standin_vllm):
    port = standin_vllm(acceptance=0.75)
    result = verify(runner, laguna_api_port=port)
    assert result.rc == 0, result.text
    assert "draft tokens accepted" in result.text
    assert result.stats["changed"].get("localhost", 0) == 0


def test_zero_acceptance_fails_with_the_diagnosis(runner, standin_vllm):
    port = standin_vllm(acceptance=0.0)
    result = verify(runner, laguna_api_port=port)
    assert result.rc != 0
    assert "Spec-decode acceptance is 0" in result.text
    assert "draft does not match the target precision" in result.text


def test_an_api_that_never_comes_up_fails_clearly(runner, standin_vllm):
    result = verify(runner, laguna_api_port=9, vllm_serve_api_retries=2)
    assert result.rc != 0
    assert "/v1/models did not answer within 2s" in result.text


def test_a_wrong_served_model_name_is_reported(runner, standin_vllm):
    port = standin_vllm(acceptance=0.75)
    result = verify(runner, laguna_api_port=port, vllm_serve_served_model_name="other")
    assert result.rc != 0
    assert "serves %s, not other" % SERVED_MODEL in result.text


def test_the_smoke_test_is_the_recipes_and_checks_the_answer(runner, standin_vllm):
    # The recipe's smoke test: "capital of France? one word" -> "Paris". A
    # healthy API that answers something else (wrong weights, a bad shard)
    # fails with the answer it gave.
    port = standin_vllm(acceptance=0.75)
    good = verify(runner, laguna_api_port=port, vllm_serve_warmup_requests=0, vllm_serve_check_acceptance=False)
    assert good.rc == 0, good.text
    assert "Paris" in good.text
    bad = verify(runner, laguna_api_port=port, vllm_serve_smoke_expect="Lyon",
                 vllm_serve_warmup_requests=0, vllm_serve_check_acceptance=False)
    assert bad.rc != 0
    assert 'answered "Paris" to "capital of France? one word" at temperature 0, expected "Lyon"' in bad.flat
