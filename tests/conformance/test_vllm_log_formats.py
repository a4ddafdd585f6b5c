"""The vLLM log lines the collection reads, against the format strings in vLLM 0.25.1.

The format strings are found at test time in the installed vllm package (the
conformance venv's vllm_src): the logger call whose format contains an anchor
("GPU KV cache size", ...), its arguments (e.g. f"{n:,}" for thousands
separators), and vLLM's log prefix (logger.py's _FORMAT / _DATE_FORMAT).  The
lines are rendered from those with the recipe's values and read by
plugins/module_utils/vllm_log.py, the collection's one reader of vLLM's log
(parse(), and report() for the benchmark), and by the benchmark playbook's
journal filter (vllm_log.ANY); the stand-in's lines must have the same shape.
"""

import ast
import os
import re
import time

import pytest
import yaml

from _conformance import ROOT
from helpers import standin as standin_vllm
from helpers.constants import KV_CACHE_TOKENS, MAX_CONCURRENCY, MAX_MODEL_LEN
from ansible_collections.laguna.spark.plugins.module_utils import vllm_log

# anchor -> (file under vllm/ expected to hold it, the recipe's values in call order)
MESSAGES = {
    "kv_tokens": ("GPU KV cache size", "v1/core/kv_cache_utils.py", [KV_CACHE_TOKENS]),
    "concurrency": ("Maximum concurrency for", "v1/core/kv_cache_utils.py", [MAX_MODEL_LEN, KV_CACHE_TOKENS / float(MAX_MODEL_LEN)]),
    "marlin": ("for CompressedTensorsWNA16",
               "model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py",
               ["MarlinLinearKernel"]),
}
LOG_METHODS = {"info", "info_once", "debug", "debug_once", "warning", "warning_once"}


def find_log_call(vllm_src, anchor, relpath):
    """(format string, argument nodes, line number) of the logger call holding `anchor`."""
    path = os.path.join(vllm_src, relpath)
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_METHODS and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and anchor in node.args[0].value):
            return node.args[0].value, node.args[1:], node.lineno
    raise AssertionError("no logger call with %r in %s: vLLM's log line changed" % (anchor, relpath))


def render_arg(node, value):
    """The value as vLLM's argument expression formats it (f"{x:,}" -> "273,095")."""
    if isinstance(node, ast.JoinedStr):
        (part,) = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        spec = "".join(c.value for c in part.format_spec.values) if part.format_spec else ""
        return format(value, spec)
    return value


def vllm_prefix(vllm_src, fileinfo, lineno):
    """vLLM's log prefix rendered from logger.py's _FORMAT and _DATE_FORMAT."""
    path = os.path.join(vllm_src, "logger.py")
    tree = ast.parse(open(path).read(), path)
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            consts[node.targets[0].id] = node.value
    fmt_node = consts["_FORMAT"]
    # The only interpolation is envs.VLLM_LOGGING_PREFIX, "" unless set.
    fmt = "".join(v.value if isinstance(v, ast.Constant) else "" for v in fmt_node.values)
    datefmt = consts["_DATE_FORMAT"].value
    return fmt % {"levelname": "INFO", "asctime": time.strftime(datefmt), "fileinfo": fileinfo,
                  "lineno": lineno, "message": ""}


@pytest.fixture(scope="module")
def lines(vllm_src):
    """{key: (vLLM log line, as journald shows it, the format string)}, rendered from vLLM's source."""
    out = {}
    for key, (anchor, relpath, values) in MESSAGES.items():
        fmt, arg_nodes, lineno = find_log_call(vllm_src, anchor, relpath)
        assert len(arg_nodes) == len(values), "%s: %d arguments now" % (fmt, len(arg_nodes))
        message = fmt % tuple(render_arg(n, v) for n, v in zip(arg_nodes, values))
        line = vllm_prefix(vllm_src, os.path.basename(relpath), lineno) + message
        out[key] = (line, "Dec 03 06:43:10 spark-1 vllm[4242]: " + line, fmt)
    return out


def test_rendered_lines_are_the_recipes(lines):
    assert lines["kv_tokens"][0].endswith("] GPU KV cache size: 273,095 tokens")
    assert lines["concurrency"][0].endswith("] Maximum concurrency for 262,144 tokens per request: 1.04x")
    assert lines["marlin"][0].endswith("] Using MarlinLinearKernel for CompressedTensorsWNA16")
    assert re.match(r"^INFO \d\d-\d\d \d\d:\d\d:\d\d \[kv_cache_utils\.py:\d+\] ", lines["kv_tokens"][0])


def test_marlin_kernel_class_exists_in_vllm(vllm_src):
    path = os.path.join(vllm_src, "model_executor", "kernels", "linear", "mixed_precision", "marlin.py")
    tree = ast.parse(open(path).read(), path)
    assert "MarlinLinearKernel" in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


@pytest.mark.parametrize("journal", [False, True], ids=["plain", "journald"])
def test_vllm_log_module_reads_them(lines, journal):
    picked = [lines[key][1 if journal else 0] for key in ("kv_tokens", "concurrency", "marlin")]
    assert vllm_log.parse(picked) == {
        "kv_cache_tokens": KV_CACHE_TOKENS, "max_concurrency": MAX_CONCURRENCY, "max_concurrency_tokens": MAX_MODEL_LEN,
        "kernels": {"CompressedTensorsWNA16": "MarlinLinearKernel"}}
    assert all(re.search(vllm_log.ANY, line) for line in picked)


def test_benchmark_reader_reads_them(lines):
    picked = [lines[k][1] for k in ("kv_tokens", "concurrency", "marlin")]
    result = vllm_log.report(picked + ["Dec 03 06:43:11 spark-1 vllm[4242]: INFO Using the default sampler"])
    assert result["kv_cache_tokens"] == KV_CACHE_TOKENS
    assert (result["max_concurrency"], result["max_concurrency_tokens"]) == (MAX_CONCURRENCY, MAX_MODEL_LEN)
    assert result["kernels"] == [{"kernel": "MarlinLinearKernel", "scheme": "CompressedTensorsWNA16"}]
    assert result["lines"] == picked


def test_benchmark_playbook_journal_filter_keeps_them():
    """benchmark.yml keeps the journal's lines through filter benchmark_log_lines, which selects
    with vllm_log.ANY (tests/unit/test_vllm_log.py); that ANY keeps each line as real vLLM's
    journal has it is test_vllm_log_module_reads_them[journald] above."""
    text = open(os.path.join(ROOT, "playbooks", "benchmark.yml")).read()
    assert "benchmark_journal.stdout_lines | default([]) | laguna.spark.benchmark_log_lines" in text, (
        "benchmark.yml no longer keeps the journal's lines with filter benchmark_log_lines")
    yaml.safe_load(text)  # still valid YAML


def test_standin_lines_have_vllms_shape(lines, capsys):
    cli, = standin_vllm.modules("vllm.entrypoints.cli")
    cli.log_kv_cache(5368709120, MAX_MODEL_LEN)
    cli.log_draft_kernel()
    got = capsys.readouterr().err.splitlines()
    assert len(got) == 3
    prefix = re.compile(r"^INFO \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+\.py:\d+\] ")
    for line, key in zip(got, ("kv_tokens", "concurrency", "marlin")):
        assert prefix.match(line), line
        # The message is exactly what vLLM renders for the recipe's values.
        assert prefix.sub("", line) == prefix.sub("", lines[key][0])
    assert vllm_log.parse(got)["kv_cache_tokens"] == KV_CACHE_TOKENS


def test_the_standins_further_lines_leave_the_readers_answer_as_it_was(lines, capsys):
    """The stand-in also writes vLLM's "Initial free memory ... reserved ... for KV Cache" line per rank
    (behind Ray's "(RayWorkerProc pid=N, ip=X) " as the driver prints a rank's line) and the periodic
    "SpecDecoding metrics: ..." line (both compared with vLLM's own by test_vllm_ray_executor.py):
    they have vLLM's prefix, and vllm_log reads the same from a log that holds them."""
    cli, = standin_vllm.modules("vllm.entrypoints.cli")
    cli.log_kv_cache_reserved([{"pid": 4242, "ip": "192.168.100.1", "free_memory": 110 << 30},
                               {"pid": 2121, "ip": "192.168.100.2", "free_memory": 109 << 30}],
                              5368709120, driver_ip="192.168.100.1")
    engine = standin_vllm.engine("laguna-s-fp8")
    engine.speed.step_s = 0.0
    list(engine.steps(30, "a prompt", 3))
    engine.log_stats()
    cli.log_kv_cache(5368709120, 262144)
    cli.log_draft_kernel()
    got = capsys.readouterr().err.splitlines()
    assert len(got) == 6
    prefix = re.compile(r"^(\(RayWorkerProc pid=\d+(, ip=[\d.]+)?\) )?INFO \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+\.py:\d+\] ")
    assert all(prefix.match(line) for line in got), got
    assert got[0].startswith("(RayWorkerProc pid=4242) INFO ") and got[1].startswith("(RayWorkerProc pid=2121, ip=")
    assert "] SpecDecoding metrics: Mean acceptance length: " in got[2]
    assert vllm_log.parse(got) == vllm_log.parse(got[3:]) == vllm_log.parse([lines[k][0] for k in
                                                                             ("kv_tokens", "concurrency", "marlin")])
    assert vllm_log.report(got)["lines"] == got[3:]


def test_the_placement_group_wait_is_read_from_vllms_own_line(vllm_src):
    """vllm_serve's verify explains an API that never came up by vLLM's "Waiting for creating a
    placement group" (vllm_log.PLACEMENT_GROUP_WAIT): vLLM 0.25.1 logs it while Ray cannot place
    the engine, and the stand-in logs the same message."""
    fmt, arg_nodes, lineno = find_log_call(vllm_src, vllm_log.PLACEMENT_GROUP_WAIT, "v1/executor/ray_utils.py")
    assert fmt.startswith(vllm_log.PLACEMENT_GROUP_WAIT + " of specs for %d seconds. specs=%s.")
    message = fmt % tuple(render_arg(n, v) for n, v in zip(arg_nodes, [10, [{"GPU": 1.0}] * 2]))
    line = vllm_prefix(vllm_src, "ray_utils.py", lineno) + message
    assert vllm_log.waits_for_placement_group(["INFO Loading weights", "Dec 03 06:43:10 spark-1 vllm[4242]: " + line])
    path = os.path.join(standin_vllm.STANDIN, "vllm", "v1", "executor", "ray_executor_v2.py")
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    standin = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
               and [getattr(t, "id", None) for t in node.targets] == ["PG_WAITING"]]
    assert standin == [fmt], "the stand-in's placement group line differs from vLLM's"
