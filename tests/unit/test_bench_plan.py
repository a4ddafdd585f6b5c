"""The benchmark playbook's decisions: which configurations it measures, in which order
(module_utils/bench_plan.py and the benchmark_sweep / benchmark_memory filters)."""
import base64

from ansible_collections.laguna.spark.plugins.module_utils import bench_plan
from helpers.filters import run_filter

NO_DRAFT = {"speculative": False, "k": None}


def k(value):
    return {"speculative": True, "k": value}


def test_the_default_sweep_is_the_baseline_then_each_k_with_the_configured_one_last():
    sweep = bench_plan.sweep([2, 4, 6, 8], baseline=True, restart=True, speculative=True, k=6)
    assert sweep["plan"] == [NO_DRAFT, k(2), k(4), k(8), k(6)]
    assert sweep["configured"] == k(6)


def test_a_configured_k_outside_the_sweep_is_not_added_and_nothing_moves():
    sweep = bench_plan.sweep([2, 4], speculative=True, k=6)
    assert sweep["plan"] == [NO_DRAFT, k(2), k(4)]
    assert sweep["configured"] == k(6)


def test_a_server_without_the_draft_puts_the_baseline_last():
    sweep = bench_plan.sweep([2, 4], baseline=True, speculative=False, k=6)
    assert sweep["plan"] == [k(2), k(4), NO_DRAFT]
    # Without the draft, k is none: the configured k does not make a different step.
    assert sweep["configured"] == NO_DRAFT


def test_repeated_k_values_are_measured_once_in_their_first_order():
    assert bench_plan.sweep([8, 2, 8, 4, 2], baseline=False, speculative=True, k=3)["plan"] == [k(8), k(2), k(4)]


def test_without_a_restart_only_the_running_configuration_is_measured():
    assert bench_plan.sweep([2, 4, 6], restart=False, speculative=True, k=4) == {"plan": [k(4)], "configured": k(4)}
    assert bench_plan.sweep([2, 4, 6], restart=False, speculative=False, k=4)["plan"] == [NO_DRAFT]


def test_no_baseline_and_no_k_values_is_an_empty_plan():
    # The playbook's "settings are sound" assertion refuses it.
    assert bench_plan.sweep([], baseline=False, speculative=True, k=6)["plan"] == []


def test_the_memory_entries_skip_the_nodes_that_could_not_be_read():
    meminfo = "MemTotal:       127535104 kB\nMemAvailable:   42598400 kB"
    reads = [{"item": "spark-1", "content": base64.b64encode(meminfo.encode()).decode(), "encoding": "base64"},
             {"item": "spark-2", "failed": True, "msg": "file not found"},
             {"item": "spark-3", "unreachable": True},
             {"item": "spark-4", "content": base64.b64encode(b"MemTotal: 1 kB").decode()}]
    assert bench_plan.node_memory(reads, "spark-1") == [
        {"host": "spark-1", "role": "head", "meminfo": meminfo},
        {"host": "spark-4", "role": "worker", "meminfo": "MemTotal: 1 kB"}]
    assert bench_plan.node_memory([], "spark-1") == []


def test_the_filters_call_the_same_logic_and_refuse_a_non_list():
    sweep, not_a_list = run_filter("benchmark", "benchmark_sweep", [
        {"args": [[2, 4, 6, 8]], "kwargs": {"baseline": True, "restart": True, "speculative": True, "k": 4}},
        {"args": ["2,4"], "kwargs": {"k": 4}}])
    assert sweep == {"plan": [NO_DRAFT, k(2), k(6), k(8), k(4)], "configured": k(4)}
    assert not_a_list.startswith("Ansible") and "benchmark_sweep: the k values must be a list" in not_a_list
    memory, bad = run_filter("benchmark", "benchmark_memory", [
        [[{"item": "h", "content": base64.b64encode(b"MemTotal: 2 kB").decode()}], "h"],
        ["nope", "h"]])
    assert memory == [{"host": "h", "role": "head", "meminfo": "MemTotal: 2 kB"}]
    assert "benchmark_memory: the input must be" in bad


def test_a_step_drafts_as_planned_only_with_k_tokens_per_draft():
    assert bench_plan.drafts_as_planned(NO_DRAFT, {"present": False, "drafts": 0, "draft_tokens": 0})
    assert not bench_plan.drafts_as_planned(NO_DRAFT, {"present": True, "drafts": 10, "draft_tokens": 60})
    assert bench_plan.drafts_as_planned(k(6), {"present": True, "drafts": 10, "draft_tokens": 60})
    # -e vllm_serve_num_speculative_tokens=4 overrode the sweep's k=6.
    assert not bench_plan.drafts_as_planned(k(6), {"present": True, "drafts": 10, "draft_tokens": 40})
    # -e vllm_serve_speculative=false overrode it: nothing drafted.
    assert not bench_plan.drafts_as_planned(k(6), {"present": False, "drafts": 0, "draft_tokens": 0})
    assert not bench_plan.drafts_as_planned(k(6), {})


def test_the_drafts_filter_reads_the_decode_results_spec():
    planned, overridden, bad = run_filter("benchmark", "benchmark_drafts_as_planned", [
        [{"spec": {"present": True, "drafts": "3", "draft_tokens": 12}}, k(4)],
        [{"spec": {"present": True, "drafts": 3, "draft_tokens": 12}}, k(6)],
        ["decode", k(6)]])
    assert planned is True and overridden is False
    assert "benchmark_drafts_as_planned: the input must be a vllm_bench result" in bad


def test_a_measured_step_is_recorded_without_what_ansible_adds():
    decode = {"changed": False, "failed": False, "decode_tok_s": 61.2, "spec": {"present": True}, "runs": [1, 2]}
    greedy = {"changed": False, "outputs": ["a", "b"]}
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    earlier = [{"speculative": False, "k": None, "ok": True, "decode": {}, "greedy": {"outputs": []}}]
    measured, without_greedy, bad_step, not_a_list = run_filter("benchmark", "benchmark_step_done", [
        {"args": [earlier, k(6)], "kwargs": {"decode": decode, "greedy": greedy}},
        {"args": [[], NO_DRAFT], "kwargs": {"decode": decode, "greedy": skipped}},
        {"args": [[], {"k": 2}], "kwargs": {"decode": decode, "greedy": greedy}},
        {"args": ["[]", k(6)], "kwargs": {"error": "boom"}}])
    record = {"speculative": True, "k": 6, "ok": True,
              "decode": {"decode_tok_s": 61.2, "spec": {"present": True}, "runs": [1, 2]},
              "greedy": {"outputs": ["a", "b"]}}
    assert measured == earlier + [record]
    assert list(measured[1]) == ["speculative", "k", "ok", "decode", "greedy"]
    assert without_greedy[0]["greedy"] == {"outputs": []} and without_greedy[0]["k"] is None
    assert "benchmark_step_done: step must be a plan step" in bad_step
    assert "benchmark_step_done: the input must be the list of the steps done" in not_a_list


def test_a_failed_step_is_recorded_with_its_error_and_nothing_measured():
    failed, no_message = run_filter("benchmark", "benchmark_step_done", [
        {"args": [[], k(4)], "kwargs": {"error": "vllm serve stopped right after starting"}},
        {"args": [[], k(4)], "kwargs": {"error": None}}])
    assert failed == [{"speculative": True, "k": 4, "ok": False, "error": "vllm serve stopped right after starting",
                       "decode": {}, "greedy": {}}]
    assert list(failed[0]) == ["speculative", "k", "ok", "error", "decode", "greedy"]
    assert no_message[0]["ok"] is False and no_message[0]["error"] is None


def test_the_ttft_results_keep_the_measurements_skips_and_failures():
    results = [
        {"item": 1024, "ansible_loop_var": "item", "changed": False, "failed": False, "target_prompt_tokens": 1024,
         "invocation": {"module_args": {}}, "ttft_s_stats": {"median": 0.1}},
        {"item": 4096, "ansible_loop_var": "item", "failed": True, "msg": "Benchmark (ttft) failed: timed out"},
        {"item": 16384, "ansible_loop_var": "item", "changed": False, "skipped": True, "skip_reason": "too long"}]
    kept, bad = run_filter("benchmark", "benchmark_ttft", [[results], [{"results": results}]])
    assert kept == [
        {"item": 1024, "failed": False, "target_prompt_tokens": 1024, "ttft_s_stats": {"median": 0.1}},
        {"item": 4096, "failed": True, "msg": "Benchmark (ttft) failed: timed out"},
        {"item": 16384, "skipped": True, "skip_reason": "too long"}]
    assert "benchmark_ttft: the input must be the results of the TTFT loop" in bad
