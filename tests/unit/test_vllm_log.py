"""The one reader of vLLM's log lines (plugins/module_utils/vllm_log.py), and who uses it.

Against the format strings of the real vLLM 0.25.1: tests/conformance/test_vllm_log_formats.py.
"""
import os
import re

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import vllm_log
from helpers import ROOT
from helpers.constants import KV_CACHE_TOKENS, MAX_CONCURRENCY, MAX_MODEL_LEN
from helpers.filters import run_filter

LINES = [
    "INFO 05-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 100 tokens",
    "(RayWorkerProc pid=1) INFO [compressed_tensors_wNa16.py:137] Using MarlinLinearKernel for CompressedTensorsWNA16",
    "INFO 05-01 10:09:00 [kv_cache_utils.py:2146] GPU KV cache size: 273,095 tokens",
    "INFO 05-01 10:09:00 [kv_cache_utils.py:2148] Maximum concurrency for 262,144 tokens per request: 1.04x",
    "INFO Using the default sampler",
]


def test_vllm_log_lines():
    log = vllm_log.report(LINES)
    assert log["kv_cache_tokens"] == KV_CACHE_TOKENS
    assert (log["max_concurrency_tokens"], log["max_concurrency"]) == (MAX_MODEL_LEN, MAX_CONCURRENCY)
    assert log["kernels"] == [{"kernel": "MarlinLinearKernel", "scheme": "CompressedTensorsWNA16"}]
    assert len(log["lines"]) == 4
    assert vllm_log.report([])["kv_cache_tokens"] is None


@pytest.mark.parametrize("line, expected", [
    ("Dec 03 06:43:10 spark-1 vllm[4242]: INFO 12-03 06:43:10 [kv_cache_utils.py:2146] GPU KV cache size: 273,095 tokens",
     {"kv_cache_tokens": KV_CACHE_TOKENS}),
    ("GPU KV cache size: 1234567 tokens", {"kv_cache_tokens": 1234567}),
    ("Maximum concurrency for 8,192 tokens per request: 33.34x",
     {"max_concurrency": 33.34, "max_concurrency_tokens": 8192}),
    ("Using MacheteLinearKernel for CompressedTensorsWNA16",
     {"kernel": "MacheteLinearKernel", "scheme": "CompressedTensorsWNA16"}),
    ("Using the default sampler", None),
    ("Using FlashAttention for attention", None),
    ("GPU KV cache size: 1,2 tokens", None),
    ("Maximum concurrency for 8,192 tokens per request: 2x", None),
])
def test_parse_line(line, expected):
    assert vllm_log.parse_line(line) == expected


def test_parse_keeps_the_last_of_each():
    assert vllm_log.parse(LINES + ["Using ExllamaLinearKernel for CompressedTensorsWNA16"]) == {
        "kv_cache_tokens": KV_CACHE_TOKENS, "max_concurrency": MAX_CONCURRENCY, "max_concurrency_tokens": MAX_MODEL_LEN,
        "kernels": {"CompressedTensorsWNA16": "ExllamaLinearKernel"}}


def test_report_keeps_the_last_lines_right_stripped():
    lines = ["GPU KV cache size: %d tokens  \n" % n for n in range(20)] + ["unrelated"]
    log = vllm_log.report(lines, keep=3)
    assert log["lines"] == ["GPU KV cache size: %d tokens" % n for n in (17, 18, 19)]
    assert log["kv_cache_tokens"] == 19 and log["kernels"] == []
    assert len(vllm_log.report(lines)["lines"]) == 12


def test_any_finds_every_line_parse_line_reads():
    for line in LINES:
        assert bool(re.search(vllm_log.ANY, line)) == (vllm_log.parse_line(line) is not None), line


def test_the_benchmark_keeps_the_journal_lines_parse_line_reads():
    """playbooks/benchmark.yml keeps the journal's lines through filter benchmark_log_lines, which
    selects with vllm_log.ANY: no copy of the pattern in the playbook."""
    text = open(os.path.join(ROOT, "playbooks", "benchmark.yml")).read()
    assert "benchmark_journal.stdout_lines | default([]) | laguna.spark.benchmark_log_lines" in text
    assert "select('search'" not in text
    journal = ["-- Boot 1 --"] + LINES + ["INFO Using the default sampler again", ""]
    kept, not_lines = run_filter("benchmark", "benchmark_log_lines", [[journal], ["GPU KV cache size: 1 tokens"]])
    assert kept == [line for line in journal if vllm_log.parse_line(line) is not None]
    assert len(kept) == 4
    assert "benchmark_log_lines: the input must be the journal's lines" in not_lines
