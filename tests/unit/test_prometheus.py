"""The one Prometheus text reader (plugins/module_utils/prometheus.py) and what is built on it.

vllm_spec_decode_info reads /metrics with prometheus.sums(), the benchmark with
bench_stats.spec_counters(); both go through prometheus.samples().  Against
vLLM 0.25.1's own exposition: tests/conformance/test_vllm_metrics.py.
"""
import pytest

from ansible_collections.laguna.spark.plugins.module_utils import bench_stats, prometheus
from test_vllm_modules import METRICS


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


def test_samples_names_labels_values():
    labels = prometheus.samples('m{a="x",position="3"} 2\nbad line\nn NaN\n')
    assert labels == [("m", {"a": "x", "position": "3"}, 2.0)]
    # Comments, a timestamp after the value, escaped quotes in a label value, +Inf.
    text = ('# HELP m help\n# TYPE m counter\nm_total{a="say \\"hi\\"",b="2"} 7 1700000000000\n'
            'h_bucket{le="+Inf"} +Inf\nbare 1.5e3\n\nbroken{a="1"} one\n')
    assert prometheus.samples(text) == [
        ("m_total", {"a": 'say \\"hi\\"', "b": "2"}, 7.0),
        ("h_bucket", {"le": "+Inf"}, float("inf")),
        ("bare", {}, 1500.0),
    ]


@pytest.mark.parametrize("value, expected", [("0", 0), ("5", 5), ("12", 12), ("", None), ("x", None),
                                             ("-1", None), ("1.0", None)])
def test_label_position(value, expected):
    labels = {"position": value} if value else {}
    assert prometheus.label_position(labels) == expected


def test_per_position_sums_over_engines():
    text = METRICS + ('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 5.0\n'
                      'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0\n'
                      'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m"} 9.0\n')
    totals = prometheus.sums(text)
    assert totals[prometheus.position_key(0)] == 105.0 and totals[prometheus.position_key(1)] == 50.0
    assert totals[prometheus.ACCEPTED_PER_POS] == 164.0
    assert prometheus.spec_decode(totals)["accepted_tokens_per_position"] == [105, 50]


def test_benchmark_counters_read_what_sums_reads():
    """bench_stats.spec_counters() and sums() are two views of the same samples()."""
    totals = prometheus.sums(METRICS)
    counters = bench_stats.spec_counters(METRICS)
    for key, name in prometheus.SPEC_DECODE.items():
        assert counters[key] == totals.get(name)
    assert counters["per_position"] == {0: totals[prometheus.position_key(0)]}
    assert bench_stats.spec_counters("") == {"drafts": None, "draft_tokens": None, "accepted_tokens": None,
                                             "per_position": {}}
