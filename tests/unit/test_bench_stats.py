"""The benchmark's arithmetic (plugins/module_utils/bench_stats.py) against known inputs."""
import math

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import bench_stats


def sample(counter, engine, value, position=None):
    """One line of vLLM 0.25's exposition: the per-position counter is declared as
    vllm:spec_decode_num_accepted_tokens_per_pos with a "position" label."""
    labels = 'engine="%d",model_name="m"' % engine + ("" if position is None else ',position="%d"' % position)
    return "vllm:spec_decode_num_%s_total{%s} %.1f\n" % (counter, labels, value)


def per_position(engine, values, first=0):
    return "".join(sample("accepted_tokens_per_pos", engine, value, pos) for pos, value in enumerate(values, first))


BEFORE = ("# TYPE vllm:spec_decode_num_drafts_total counter\n"
          + sample("drafts", 0, 100) + sample("draft_tokens", 0, 600) + sample("accepted_tokens", 0, 300)
          + per_position(0, [90, 80, 60, 40, 20, 10]) + 'vllm:gpu_cache_usage_perc{engine="0"} NaN\n')
# 200 more drafts with the recipe's per-position acceptance, split over two engines.
AFTER = (sample("drafts", 0, 200) + sample("drafts", 1, 100) + sample("draft_tokens", 0, 1200)
         + sample("draft_tokens", 1, 600) + sample("accepted_tokens", 0, 700) + sample("accepted_tokens", 1, 348)
         + sample("accepted_tokens_per_pos", 0, 178, 0) + sample("accepted_tokens_per_pos", 1, 90, 0)
         + per_position(0, [232, 190, 150, 116, 92], first=1))


def test_decode_rate_is_the_recipes_formula():
    # 61 tokens, the first at 1.0 s and the last at 3.0 s: 60 tokens in 2 s.
    assert bench_stats.decode_rate(61, 1.0, 3.0) == 30.0
    assert bench_stats.decode_rate(1, 1.0, 3.0) is None
    assert bench_stats.decode_rate(10, 2.0, 2.0) is None
    assert bench_stats.decode_rate(None, 1.0, 2.0) is None


def test_median_and_spread():
    stats = bench_stats.summary([60.0, 58.0, 63.0, None, 61.0])
    assert stats["n"] == 4 and stats["median"] == 60.5
    assert (stats["min"], stats["max"], stats["spread"]) == (58.0, 63.0, 5.0)
    assert stats["stdev"] == pytest.approx(math.sqrt(((60 - 60.5) ** 2 + 2.5 ** 2 + 2.5 ** 2 + 0.5 ** 2) / 3))
    assert stats["relative_spread"] == pytest.approx(5.0 / 60.5)
    assert bench_stats.summary([7.0])["stdev"] == 0.0 and bench_stats.median([3, 1, 2]) == 2.0
    assert bench_stats.summary([None])["median"] is None


def test_counters_sum_engines_and_keep_positions():
    counters = bench_stats.spec_counters(AFTER)
    assert counters["drafts"] == 300.0 and counters["accepted_tokens"] == 1048.0
    assert counters["per_position"] == {0: 268.0, 1: 232.0, 2: 190.0, 3: 150.0, 4: 116.0, 5: 92.0}


def test_window_of_the_recipes_acceptance():
    spec = bench_stats.spec_window(bench_stats.spec_counters(BEFORE), bench_stats.spec_counters(AFTER))
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (200, 1200, 748)
    assert spec["acceptance_rate"] == pytest.approx(748 / 1200)
    assert spec["per_position_accepted"] == [178, 152, 130, 110, 96, 82]
    assert spec["per_position"] == pytest.approx([0.89, 0.76, 0.65, 0.55, 0.48, 0.41])
    # The recipe's "3.73 tokens/step" is accepted tokens per draft (0.622 x 6) ...
    assert spec["accepted_per_draft"] == pytest.approx(3.74)
    # ... and vLLM's mean acceptance length counts the bonus token on top.
    assert spec["mean_acceptance_length"] == pytest.approx(4.74)
    assert sum(spec["per_position"]) == pytest.approx(spec["accepted_per_draft"])


def test_window_without_spec_decode_and_after_a_restart():
    none = bench_stats.spec_window({}, bench_stats.spec_counters("vllm:generation_tokens_total 5\n"))
    assert not none["present"] and none["acceptance_rate"] is None and none["per_position"] == []
    reset = bench_stats.spec_window(bench_stats.spec_counters(AFTER), bench_stats.spec_counters(BEFORE))
    assert reset["reset"] and reset["acceptance_rate"] is None


def test_compare_tokens():
    assert bench_stats.compare_tokens([1, 2, 3], [1, 2, 3]) == {
        "identical": True, "first_difference": None, "reference_tokens": 3, "tokens": 3}
    assert bench_stats.compare_tokens([1, 2, 3], [1, 9, 3])["first_difference"] == 1
    assert bench_stats.compare_tokens([1, 2, 3], [1, 2])["first_difference"] == 2
    assert not bench_stats.compare_tokens([], [])["identical"]
    assert bench_stats.token_digest([1, 2]) != bench_stats.token_digest([2, 1])


def test_meminfo_used_is_total_minus_available():
    text = "MemTotal:       127535104 kB\nMemFree:         1000000 kB\nMemAvailable:   42598400 kB\n"
    mem = bench_stats.meminfo(text)
    assert mem["total_bytes"] == 127535104 * 1024
    assert mem["used_bytes"] == (127535104 - 42598400) * 1024
    assert mem["used_gib"] == pytest.approx(81.0, abs=0.01)
    assert mem["total_gib"] == pytest.approx(121.63, abs=0.01)
    old = bench_stats.meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n")
    assert old["used_bytes"] == 600 * 1024
    assert bench_stats.meminfo("")["used_gib"] is None


def test_ratio():
    assert bench_stats.ratio(60.9, 26.5) == pytest.approx(2.298, abs=1e-3)
    assert bench_stats.ratio(None, 26.5) is None and bench_stats.ratio(1.0, 0) is None
