"""vllm_serve's verification (API wait, smoke test, acceptance) against a stand-in server."""
from ansible_collections.laguna.spark.plugins.module_utils import vllm_health
from helpers import free_port, role_events
from helpers.constants import SERVED_MODEL
# A head on localhost (a fake systemd, the stand-in vLLM), for the whole role.
from test_benchmark import node  # noqa: F401  # pylint: disable=unused-import


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


def test_a_wedged_engine_lists_its_model_but_fails_the_smoke_test_as_hung(runner, standin_vllm):
    # The stand-in's wedge (as vLLM's engine stuck in a collective): /health
    # and /v1/models answer, no completion finishes, vllm:generation_tokens
    # stands still. The verification's smoke test (the same as the hang
    # check's and the fast path's) names the wedge.
    port = standin_vllm(acceptance=0.75)
    standin_vllm.wedge.write_text("%d\n" % standin_vllm.pid)
    result = verify(runner, laguna_api_port=port, vllm_serve_request_timeout=2, vllm_serve_warmup_requests=0,
                    vllm_serve_check_acceptance=False)
    assert result.rc != 0
    assert ("(%s to \"capital of France? one word\" at temperature 0) got no answer within 2 s; " % SERVED_MODEL +
            'vLLM generated no token meanwhile: its engine is wedged') in result.flat, result.text
    standin_vllm.wedge.write_text("")
    again = verify(runner, laguna_api_port=port, vllm_serve_warmup_requests=0, vllm_serve_check_acceptance=False)
    assert again.rc == 0 and "Paris" in again.text
    # The counter that tells wedged from busy moves with the stand-in's tokens.
    assert vllm_health.generated_tokens("http://127.0.0.1:%d" % port, 5) > 0


# The whole role on a head on localhost (test_benchmark's node: a fake
# systemd that really runs the unit's command, the stand-in vLLM, staged
# checkpoints): started once, then a rerun reaches the node with the probe
# only - its two reads, the raylet and GPU read of every node (here, the head
# alone) and the head's vllm_serve_probe - and changes nothing.
def test_a_rerun_on_a_converged_head_reaches_it_with_the_probe_only(runner, node):
    extra = dict(node.vars, vllm_serve_warmup_requests=1, vllm_serve_warmup_max_tokens=16)
    first = runner.include_role("vllm_serve", extra)
    assert first.rc == 0, first.text
    assert first.stats["changed"].get("localhost", 0) >= 1
    assert "draft tokens accepted" in first.flat, first.text
    starts = [call for call in node.systemd()["calls"] if call[0] == "systemd-run"]
    assert len(starts) == 1

    again = runner.include_role("vllm_serve", extra)
    assert again.rc == 0, again.text
    assert again.stats["changed"].get("localhost", 0) == 0, again.text
    assert role_events.node_tasks(again.events, "vllm_serve") == ["laguna.spark.vllm_serve_probe"] * 2, again.text
    assert "The probe verified the running server" in again.flat and "Paris" in again.flat, again.text
    assert [call for call in node.systemd()["calls"] if call[0] == "systemd-run"] == starts

    # Check mode on a changed setting (another port: the fake systemd's
    # processes are in no unit, so the running stand-in would count as a
    # stranger on its own port): the probe names the unit's new
    # configuration, the start is what a run would change, and nothing starts.
    check = runner.include_role("vllm_serve", dict(extra, laguna_api_port=free_port()), cmdline="--check")
    assert check.rc == 0, check.text
    assert "laguna-vllm.service: runs configuration" in check.flat, check.text
    assert "changed: [localhost]" in check.text.split("TASK [laguna.spark.vllm_serve : Run vllm serve]")[1], check.text
    assert [call for call in node.systemd()["calls"] if call[0] == "systemd-run"] == starts
