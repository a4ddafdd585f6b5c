"""The benchmark report (module_utils/bench_report.py and the bench_report module) from known raw results."""
import copy
import json

import pytest
from PIL import Image

from ansible_collections.laguna.spark.plugins.module_utils import bench_report, bench_stats
from ansible_collections.laguna.spark.plugins.modules import bench_report as bench_report_module
from helpers.constants import KV_CACHE_TOKENS, SERVED_MODEL

STANDIN = "0.0.0+laguna.standin"
MEMINFO = "MemTotal:       127535104 kB\nMemAvailable:   %d kB\n"


def decode(values, per_position=None, k=None, version=STANDIN):
    spec = bench_stats.spec_window({}, {})
    if per_position:
        drafts = 1000
        per_pos = {i: p * drafts for i, p in enumerate(per_position)}
        spec = bench_stats.spec_window(
            {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "per_position": {}},
            {"drafts": drafts, "draft_tokens": drafts * k, "accepted_tokens": sum(per_pos.values()),
             "per_position": per_pos})
    return {"model": SERVED_MODEL, "server_version": version, "prompt_tokens": 2048, "prompt_exact": True,
            "completion_tokens": 512, "decode_tok_s_stats": bench_stats.summary(values),
            "ttft_s_stats": bench_stats.summary([0.7, 0.71]), "spec": spec,
            "runs": [{"decode_tok_s": v, "ttft_s": 0.7} for v in values]}


def greedy(*outputs):
    return {"outputs": [{"prompt": "prompt %d" % i, "token_ids": ids} for i, ids in enumerate(outputs)]}


def ttft(target, values=None, skipped=None):
    if skipped:
        return {"skipped": True, "msg": skipped, "target_prompt_tokens": target, "prompt_exact": False}
    return {"target_prompt_tokens": target, "prompt_tokens": target, "prompt_exact": True,
            "ttft_s_stats": bench_stats.summary(values), "runs": [{"ttft_s": v} for v in values]}


@pytest.fixture
def raw():
    return {
        "generated_at": "2026-12-03T10:00:00Z", "model": SERVED_MODEL,
        "hosts": {"head": "spark-1", "workers": ["spark-2"]},
        "configured": {"speculative": True, "k": 6},
        "settings": {"prompt_tokens": 2048, "max_tokens": 512, "runs": 3, "warmup": 2},
        "steps": [
            {"speculative": False, "k": None, "ok": True, "decode": decode([26.0, 26.5, 27.0]),
             "greedy": greedy([1, 2, 3], [4, 5, 6])},
            {"speculative": True, "k": 2, "ok": True, "decode": decode([50.0, 52.0, 51.0], [0.89, 0.76], 2),
             "greedy": greedy([1, 2, 9], [4, 5, 6])},
            {"speculative": True, "k": 8, "ok": False, "error": "API did not come up", "decode": {}, "greedy": {}},
            {"speculative": True, "k": 6, "ok": True,
             "decode": decode([60.0, 60.9, 61.5], [0.89, 0.76, 0.65, 0.55, 0.48, 0.41], 6),
             "greedy": greedy([1, 2, 3], [4, 5, 6])},
        ],
        "ttft": [ttft(32768, [8.9]), ttft(2048, [0.7, 0.8]),
                 ttft(253952, skipped="253952 prompt + 8 completion tokens exceed the served context of 4096 tokens")],
        "memory": [{"host": "spark-1", "role": "head", "meminfo": MEMINFO % 42598400},
                   {"host": "spark-2", "role": "worker", "meminfo": MEMINFO % 49938432}],
        "vllm_log": ["GPU KV cache size: 273,095 tokens",
                     "Maximum concurrency for 262,144 tokens per request: 1.04x",
                     "Using MarlinLinearKernel for CompressedTensorsWNA16"],
        "failures": [],
    }


def test_build_normalizes_and_derives(raw):
    report = bench_report.build(raw)
    assert report["schema"] == "laguna.spark.benchmark/1" and report["standin"]
    assert [d["name"] for d in report["decode"]] == ["no draft", "k=2", "k=6", "k=8"]
    k6 = report["decode"][2]
    assert k6["tok_s"]["median"] == 60.9 and k6["speedup"] == pytest.approx(60.9 / 26.5)
    assert k6["spec"]["acceptance_rate"] == pytest.approx(3.74 / 6)
    assert k6["spec"]["per_position"] == pytest.approx([0.89, 0.76, 0.65, 0.55, 0.48, 0.41])
    assert report["decode"][0]["speedup"] is None and report["best_k"] == 6
    assert report["failures"] == [{"step": "k=8", "error": "API did not come up"}]
    assert [t["target_prompt_tokens"] for t in report["ttft"]] == [2048, 32768, 253952]
    assert report["ttft"][0]["ttft_s"]["median"] == pytest.approx(0.75) and report["ttft"][2]["skipped"]
    identity = report["identity"]
    assert identity["checked"] and identity["all_identical"] is False
    k2 = identity["configs"][0]
    assert k2["name"] == "k=2" and [p["identical"] for p in k2["prompts"]] == [False, True]
    assert k2["prompts"][0]["first_difference"] == 2
    assert identity["configs"][1]["all_identical"]
    assert [(m["host"], round(m["used_gib"], 1)) for m in report["memory"]] == [("spark-1", 81.0), ("spark-2", 74.0)]
    assert report["vllm_log"]["kv_cache_tokens"] == KV_CACHE_TOKENS
    json.dumps(report)  # serializable as is


def test_comparison_puts_the_recipe_beside_the_run(raw):
    rows = {r["figure"]: r for r in bench_report.build(raw)["comparison"]}
    assert rows["decode tok/s, k=6, 2048-token prompt"] == {
        "figure": "decode tok/s, k=6, 2048-token prompt", "recipe": "60.9", "measured": "60.9 (60.0–61.5, n=3)"}
    assert rows["decode tok/s without the draft"]["recipe"] == "26.5"
    assert rows["speed-up at k=6"]["measured"] == "2.30x"
    assert rows["draft acceptance at k=6"] == {"figure": "draft acceptance at k=6", "recipe": "62.2%", "measured": "62.3%"}
    assert rows["acceptance per position"]["recipe"] == "0.89 / 0.76 / 0.65 / 0.55 / 0.48 / 0.41"
    assert rows["tokens/step (accepted draft tokens per step)"]["measured"] == "3.74"
    assert rows["TTFT at 2K"]["recipe"] == "0.7 s" and rows["TTFT at 2K"]["measured"] == "0.75 (0.70–0.80, n=2) s"
    assert rows["TTFT at 128K"]["measured"] == "not measured"
    assert rows["TTFT at 248K"]["measured"].startswith("skipped: ")
    assert rows["memory used, head"]["measured"] == "spark-1: 81.0 of 122 GiB"
    assert rows["KV pool"] == {"figure": "KV pool", "recipe": "273,095 tokens (1.04x)", "measured": "273,095 tokens (1.04x)"}
    assert rows["draft kernel"]["measured"] == "MarlinLinearKernel for CompressedTensorsWNA16"
    assert rows["greedy output with the draft"]["measured"] == "3 of 4 outputs token-identical (k=2, k=6)"


def test_markdown_of_a_standin_run_says_so_first(raw):
    text = bench_report.markdown(bench_report.build(raw), [("tok_s_vs_k", "tok_s_vs_k.png")])
    lines = text.splitlines()
    assert lines[0].startswith("**STAND-IN RUN, not a measurement of Laguna-S 2.1:**")
    assert STANDIN in lines[0]
    assert "| figure | recipe | this run (stand-in) |" in lines
    assert "| decode tok/s, k=6, 2048-token prompt | 60.9 | 60.9 (60.0–61.5, n=3) |" in lines
    assert "| k=6 (best) | 60.9 | 60.0–61.5 | 0.75 | 2.30x | 62.3% | 3.74 | 4.74 | 0.705 s |" in lines
    assert "| k=8 | failed: API did not come up | | | | | | | |" in lines
    assert "| k=2 | 0.890 | 0.760 |  |  |  |  |" in lines
    assert "| recipe, k=6 | 0.89 | 0.76 | 0.65 | 0.55 | 0.48 | 0.41 |" in lines
    assert "| k=2 | 0: prompt 0 | **no** | token 2 | 3 / 3 |" in lines
    assert "| spark-2 | worker | 74.0 | 121.6 | ~74 GiB |" in lines
    assert "    GPU KV cache size: 273,095 tokens" in lines
    assert "- k=8: API did not come up" in lines
    assert "![tok_s_vs_k](tok_s_vs_k.png)" in lines


def test_markdown_of_a_real_run_has_no_standin_mark(raw):
    real = copy.deepcopy(raw)
    for step in real["steps"]:
        if step["decode"]:
            step["decode"]["server_version"] = "0.25.1"
    report = bench_report.build(real)
    text = bench_report.markdown(report)
    assert not report["standin"]
    assert text.splitlines()[0] == "# Laguna-S 2.1 FP8 benchmark: %s on spark-1, spark-2" % SERVED_MODEL
    assert "stand-in" not in text.lower()
    assert "| figure | recipe | this run |" in text


def test_plot_data(raw):
    data = bench_report.plot_data(bench_report.build(raw))
    tok = data["tok_s_vs_k"]
    assert tok["title"].endswith("(STAND-IN)")
    run, recipe = tok["series"]
    assert (run["x"], run["y"]) == ([0, 2, 6], [26.5, 51.0, 60.9])
    assert (run["low"], run["high"]) == ([26.0, 50.0, 60.0], [27.0, 52.0, 61.5])
    assert (recipe["x"], recipe["y"]) == ([0, 6], [26.5, 60.9])
    accept = data["acceptance_by_position"]["series"]
    assert [s["label"] for s in accept] == ["this run (stand-in), k=2", "this run (stand-in), k=6", "recipe, k=6"]
    assert accept[1]["x"] == [1, 2, 3, 4, 5, 6] and accept[1]["y"] == pytest.approx(bench_report.RECIPE["per_position"])
    ttft_run, ttft_recipe = data["ttft_vs_prompt"]["series"]
    assert ttft_run["x"] == [2048, 32768] and ttft_run["y"] == pytest.approx([0.75, 8.9])
    assert ttft_recipe["x"] == [2048, 32768, 131072, 253952] and ttft_recipe["y"] == [0.7, 8.9, 47.0, 118.0]


def test_plots_are_pngs_that_carry_their_data(raw, tmp_path):
    report = bench_report.build(raw)
    paths = {name: str(tmp_path / (name + ".png")) for name in bench_report.PLOTS}
    data = bench_report.render_plots(report, paths)
    for name in bench_report.PLOTS:
        image = Image.open(paths[name])
        assert image.format == "PNG" and image.size == (700, 450)
        assert json.loads(image.text["Description"]) == json.loads(json.dumps(data[name], sort_keys=True))
        assert image.text["Title"] == data[name]["title"]
        assert len(image.convert("RGB").getcolors(1 << 16)) > 10  # something was drawn


def test_module_writes_json_markdown_and_plots_once(raw, tmp_path, run_module):
    dest = tmp_path / "results" / "now"
    result = run_module(bench_report_module, {"results": raw, "dest": str(dest)})
    assert result["changed"] and result["standin"] and result["best_k"] == 6 and result["identical"] is False
    assert sorted(p.name for p in dest.iterdir()) == [
        "acceptance_by_position.png", "report.md", "results.json", "tok_s_vs_k.png", "ttft_vs_prompt.png"]
    written = json.loads((dest / "results.json").read_text())
    assert written == json.loads(json.dumps(bench_report.build(raw)))
    assert (dest / "report.md").read_text().splitlines()[0] == result["first_line"]
    again = run_module(bench_report_module, {"results": raw, "dest": str(dest)})
    assert not again["changed"]


def test_module_check_mode_and_preflight(raw, tmp_path, run_module):
    dest = tmp_path / "out"
    result = run_module(bench_report_module, {"results": raw, "dest": str(dest)}, check_mode=True)
    assert result["changed"] and not dest.exists()
    pre = run_module(bench_report_module, {"dest": str(dest), "preflight": True})
    assert not pre["changed"] and pre["matplotlib"] and not dest.exists()
    (tmp_path / "file").write_text("")
    bad = run_module(bench_report_module, {"dest": str(tmp_path / "file" / "sub"), "preflight": True})
    assert bad.failed and "cannot be written" in bad["msg"]


def test_module_without_matplotlib_fails_early(tmp_path, run_module, monkeypatch):
    def missing():
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(bench_report_module, "_matplotlib_version", missing)
    result = run_module(bench_report_module, {"dest": str(tmp_path), "preflight": True})
    assert result.failed and "plots need matplotlib" in result["msg"]
    assert not run_module(bench_report_module, {"dest": str(tmp_path), "preflight": True, "plots": False}).failed
