"""Spec-decode /metrics: vLLM 0.25.1's own exposition vs the stand-in's, and the readers.

The real text comes from the conformance venv (probe_vllm_args.py, "metrics"
stage): vLLM's PrometheusStatLogger registered for the rendered serve config, fed
METRICS_DRAFTS through SpecDecodingStats / SpecDecodingProm, exposed by
prometheus_client.  No metric name is typed in here except to pick families.
The collection reads /metrics with one parser, prometheus.samples(), under
prometheus.sums() (vllm_spec_decode_info) and bench_stats.spec_counters() (the
benchmark); it must read every sample prometheus_client's own parser reads.
"""

import math
import re

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import bench_stats, prometheus, vllm_health
from _conformance import METRICS_DRAFTS
from helpers import standin

_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def families(text, prefix="vllm:spec_decode"):
    """{sample name: (declared type, label names, number of samples)} of one exposition."""
    types, seen = {}, {}
    for line in text.splitlines():
        match = _TYPE.match(line)
        if match:
            types[match.group(1)] = match.group(2)
            continue
        match = _SAMPLE.match(line)
        if match and match.group(1).startswith(prefix):
            name = match.group(1)
            labels = tuple(sorted(k for k, _value in _LABEL.findall(match.group(2) or "")))
            count = seen.get(name, (None, labels, 0))[2]
            seen[name] = (types.get(name), labels, count + 1)
    return seen


@pytest.fixture(scope="module")
def real(vllm_probe):
    case = vllm_probe["cases"]["rendered"]
    assert "metrics" in case["stages"], case.get("error")
    return case["metrics"]


@pytest.fixture(scope="module")
def standin_text(real, head):
    observed = real["observed"]
    engine = standin.engine(head["vars"]["vllm_serve_served_model_name"])
    engine.counters.update(drafts=observed["num_drafts"], draft_tokens=observed["num_draft_tokens"],
                           accepted=observed["num_accepted_tokens"],
                           accepted_per_pos=list(observed["num_accepted_tokens_per_pos"]))
    return engine.metrics()


def test_vllm_registers_the_spec_decode_families_with_these_labels(real):
    spec = {name: fam for name, fam in real["families"].items() if name.startswith("vllm:spec_decode")}
    # The families the collection reads exist, as counters, labelled by engine and model.
    for name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos"):
        assert spec[name]["type"] == "counter", name
        assert name + "_total" in spec[name]["samples"]
    assert spec["vllm:spec_decode_num_accepted_tokens_per_pos"]["labels"] == ["engine", "model_name", "position"]
    assert spec["vllm:spec_decode_num_drafts"]["labels"] == ["engine", "model_name"]


def test_standin_metrics_have_vllms_names_types_and_labels(real, standin_text):
    ours, theirs = families(standin_text), families(real["text"])
    assert theirs, "no spec-decode samples in vLLM's exposition"
    assert ours == theirs


def test_standin_token_counters_are_declared_as_vllm_declares_them(real, standin_text):
    ours, theirs = families(standin_text, "vllm:"), families(real["text"], "vllm:")
    for name, (kind, labels, _count) in ours.items():
        assert name in theirs, "%s is not a metric vLLM 0.25.1 exports" % name
        assert theirs[name][:2] == (kind, labels), name


def test_acceptance_reader_parses_real_vllm_output(real, head):
    observed = real["observed"]
    spec = prometheus.spec_decode(prometheus.sums(real["text"]))
    assert spec["present"]
    assert spec["drafts"] == observed["num_drafts"] == len(METRICS_DRAFTS)
    assert spec["draft_tokens"] == observed["num_draft_tokens"] == 6 * len(METRICS_DRAFTS)
    assert spec["accepted_tokens"] == observed["num_accepted_tokens"] == sum(METRICS_DRAFTS)
    assert spec["acceptance_rate"] == sum(METRICS_DRAFTS) / (6.0 * len(METRICS_DRAFTS))
    expected = [sum(1 for n in METRICS_DRAFTS if n > pos) for pos in range(6)]
    assert spec["accepted_tokens_per_position"] == expected == observed["num_accepted_tokens_per_pos"]
    assert spec["acceptance_per_position"] == [n / float(len(METRICS_DRAFTS)) for n in expected]


def test_benchmark_reader_parses_real_vllm_output(real):
    counters = bench_stats.spec_counters(real["text"])
    assert counters["drafts"] == len(METRICS_DRAFTS)
    assert counters["accepted_tokens"] == sum(METRICS_DRAFTS)
    assert [counters["per_position"][p] for p in sorted(counters["per_position"])] == \
        real["observed"]["num_accepted_tokens_per_pos"]
    window = bench_stats.spec_window({"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0,
                                      "per_position": {}}, counters)
    assert window["present"] and not window["reset"]
    assert window["acceptance_rate"] == sum(METRICS_DRAFTS) / (6.0 * len(METRICS_DRAFTS))


def test_standin_and_vllm_read_the_same(real, standin_text):
    assert prometheus.spec_decode(prometheus.sums(standin_text)) == \
        prometheus.spec_decode(prometheus.sums(real["text"]))


def test_the_one_parser_reads_what_prometheus_client_reads(real):
    """prometheus.samples() on vLLM's whole exposition (every family, not only spec decode)
    finds the samples prometheus_client's parser finds, with the same labels and values."""
    def key(sample):
        name, labels, value = sample
        return name, tuple(sorted(labels.items())), value

    theirs = sorted(key(s) for s in real["samples"] if not math.isnan(s[2]))
    ours = sorted(key(s) for s in prometheus.samples(real["text"]))
    assert len(theirs) > 20 and any(name.startswith("vllm:spec_decode") for name, _l, _v in theirs)
    assert ours == theirs


def test_both_views_of_the_one_parser_agree_on_real_vllm_output(real):
    totals = prometheus.sums(real["text"])
    counters = bench_stats.spec_counters(real["text"])
    for key, name in prometheus.SPEC_DECODE.items():
        assert counters[key] == totals[name], key
    assert [counters["per_position"][p] for p in sorted(counters["per_position"])] == \
        prometheus.spec_decode(totals)["accepted_tokens_per_position"]


def _counters(text):
    """{counter name: label names} of the `_total` samples of counters, and {name: label names} of `_created`."""
    seen = families(text, "vllm:")
    totals = {name[:-len("_total")]: labels for name, (kind, labels, _n) in seen.items()
              if kind == "counter" and name.endswith("_total")}
    created = {name[:-len("_created")]: labels for name, (kind, labels, _n) in seen.items()
               if kind == "gauge" and name.endswith("_created")}
    return totals, created


def test_every_counter_has_its_created_series_as_in_vllm(real, standin_text):
    """prometheus_client writes a `<name>_created` gauge beside each counter's `_total`, with the same
    labels; vLLM's exposition has one for every counter, and so must the stand-in's."""
    totals, created = _counters(real["text"])
    assert "vllm:prompt_tokens" in totals and "vllm:spec_decode_num_drafts" in totals
    assert {name: created.get(name) for name in totals} == totals
    ours, ours_created = _counters(standin_text)
    assert "vllm:prompt_tokens" in ours and {name: ours_created.get(name) for name in ours} == ours


def test_the_generated_token_counter_the_smoke_test_reads_is_vllms(real, standin_text):
    # vllm_health.smoke() tells a wedged engine (the counter stands still) from
    # a busy one (it moves) by this counter: it must be vLLM's, and the stand-in's.
    for text in (real["text"], standin_text):
        assert vllm_health.GENERATION_TOKENS in prometheus.sums(text)
        assert "# TYPE %s counter" % vllm_health.GENERATION_TOKENS in text
