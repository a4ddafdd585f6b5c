"""dflash_draft's matching agrees with vLLM 0.25.1's own compressed-tensors code.

vLLM runs in the conformance venv (fixture ``vllm_python``): its
``should_ignore_layer``, ``find_matched_target`` and
``CompressedTensorsConfig.from_config(...).get_scheme_dict`` decide, for every
linear layer of each generated draft and for a set of tricky ignore/target
entries, whether the layer is ignored, which target matches, and so whether it
is built quantized; the module's answers must be the same.
"""
import json
import os
import subprocess

import pytest

from helpers import draft_fixtures as fx
from helpers.collection import collections_path

collections_path()
from ansible_collections.laguna.spark.plugins.module_utils import dflash_quant as dquant  # noqa: E402
from ansible_collections.laguna.spark.plugins.module_utils import dflash_vllm as dvllm  # noqa: E402

VLLM_SIDE = r'''
import json, sys, types
import torch
from vllm.model_executor.layers.quantization.compressed_tensors.utils import (
    should_ignore_layer, find_matched_target)
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
    CompressedTensorsConfig)
import vllm
assert vllm.__version__.startswith("0.25.1"), vllm.__version__

def module_of(cls_name):
    return type(cls_name, (torch.nn.Module,), {})()

out = []
for case in json.load(sys.stdin):
    name, cls, fused = case["name"], case["cls"], case.get("fused") or {}
    row = {}
    try:
        row["ignored"] = should_ignore_layer(name, ignore=case["ignore"], fused_mapping=fused)
    except ValueError as exc:
        row["ignored"] = "ValueError"
    if "targets" in case:
        row["target"] = find_matched_target(name, module_of(cls), case["targets"], fused_mapping=fused)
    if "quant" in case:
        config = CompressedTensorsConfig.from_config(json.loads(json.dumps(case["quant"])))
        try:
            scheme = config.get_scheme_dict(module_of(cls), layer_name=name)
            row["quantized"] = scheme is not None and scheme.get("weights") is not None
        except ValueError:
            row["quantized"] = "ValueError"
    out.append(row)
sys.stdout.write("\n@@laguna-result@@" + json.dumps(out) + "\n")
'''


def vllm_decide(vllm_python, cases):
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", VLLM_CONFIGURE_LOGGING="0")
    done = subprocess.run([vllm_python, "-c", VLLM_SIDE], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("@@laguna-result@@")][-1]
    return json.loads(line[len("@@laguna-result@@"):])


@pytest.fixture(scope="module")
def decided(vllm_python, tmp_path_factory):
    """All cases of this module, decided by vLLM in one run (importing vLLM is slow)."""
    tmp = tmp_path_factory.mktemp("drafts")
    groups = {"drafts": draft_cases(tmp), "entries": entry_cases(), "rewritten": rewritten_cases(tmp)}
    flat = [{k: v for k, v in c.items() if k != "kind"} for g in groups.values() for c in g]
    answers = vllm_decide(vllm_python, flat)
    out, start = {}, 0
    for key, cases in groups.items():
        out[key] = (cases, answers[start:start + len(cases)])
        start += len(cases)
    return out


def ours(case):
    row = {}
    try:
        row["ignored"] = dvllm.should_ignore_layer(case["name"], case["ignore"], case.get("fused"))[0]
    except ValueError:
        row["ignored"] = "ValueError"
    if "targets" in case:
        row["target"] = dvllm.find_matched_target(case["name"], case["cls"], case["targets"], case.get("fused"))
    if "quant" in case:
        layer = {"name": case["name"], "cls": case["cls"], "quantizable": True}
        row["quantized"] = dquant.quant_decision(layer, case["quant"])["quantized"]
    return row


def draft_cases(tmp_path):
    cases = []
    for kind in ("good", "literal", "qkv_quantized", "nvfp4_target", "bf16"):
        path = fx.make_draft(str(tmp_path / kind), kind)
        config = json.load(open(os.path.join(path, "config.json")))
        quant = config.get("quantization_config")
        if not quant:
            continue
        for layer in dvllm.draft_linear_layers(config, fx.HIDDEN):
            targets = [t for g in quant["config_groups"].values() for t in g["targets"]]
            cases.append({"kind": kind, "name": layer["name"], "cls": layer["cls"],
                          "ignore": quant["ignore"], "targets": targets, "quant": quant})
    return cases


NAMES = [("model.layers.0.self_attn.qkv_proj", "QKVParallelLinear"),
         ("model.layers.3.self_attn.g_proj", "ColumnParallelLinear"),
         ("model.layers.12.mlp.down_proj", "RowParallelLinear"),
         ("model.fc", "ReplicatedLinear"), ("lm_head", "ParallelLMHead")]
ENTRIES = ["layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.qkv_proj", "re:.*\\.self_attn\\.qkv_proj$",
           "re:layers\\.\\d+\\.self_attn\\.qkv_proj$", "re:.*v_proj$", "re:.*\\.v_proj$", "re:(?:.*\\.)?fc$",
           "fc", "lm_head", "re:.*proj", "re:model\\.layers\\.1\\d\\..*", "Linear", "re:.*Linear$",
           "re:.*\\.layers\\.3\\.self_attn\\.g_proj$", "re:(?:.*\\.)?layers\\.0\\.self_attn\\.qkv_proj$"]
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}


def entry_cases():
    cases = []
    for name, cls in NAMES:
        for entry in ENTRIES:
            for fused in (None, FUSED):
                cases.append({"name": name, "cls": cls, "ignore": [entry], "targets": [entry], "fused": fused})
        shard_targets = ["re:.*\\.q_proj$", "re:.*\\.k_proj$", "re:.*\\.v_proj$"]
        cases.append({"name": name, "cls": cls, "ignore": ["re:.*\\.q_proj$"], "targets": shard_targets,
                      "fused": FUSED})
    return cases


def test_every_draft_layer_is_decided_as_vllm_decides(decided):
    cases, theirs = decided["drafts"]
    assert len(cases) == 4 * 13
    mismatches = [(c["kind"], c["name"], ours(c), t) for c, t in zip(cases, theirs) if ours(c) != t]
    assert mismatches == []
    # and the verdicts themselves are the ones the recipe describes
    by = {(c["kind"], c["name"]): t["quantized"] for c, t in zip(cases, theirs)}
    assert by[("good", "model.layers.0.self_attn.qkv_proj")] is False
    assert by[("good", "model.fc")] is True
    assert by[("literal", "model.layers.1.self_attn.g_proj")] is True
    assert by[("qkv_quantized", "model.layers.0.self_attn.qkv_proj")] is True


def test_tricky_entries_match_as_in_vllm(decided):
    cases, theirs = decided["entries"]
    mismatches = [(c, ours(c), t) for c, t in zip(cases, theirs) if ours(c) != t]
    assert mismatches == []
    assert any(t["ignored"] == "ValueError" for t in theirs)  # shards that disagree, as vLLM raises


def rewritten_cases(tmp_path):
    path = fx.make_draft(str(tmp_path / "literal-fixed"), "literal")
    config = json.load(open(os.path.join(path, "config.json")))
    fixed, changes, _unmatched = dquant.fix_ignore_config(config)
    assert changes
    quant = fixed["quantization_config"]
    return [{"name": l["name"], "cls": l["cls"], "ignore": quant["ignore"], "quant": quant}
            for l in dvllm.draft_linear_layers(fixed, fx.HIDDEN)]


def test_rewritten_ignore_lists_hold_in_vllm(decided):
    cases, theirs = decided["rewritten"]
    assert [ours(c) for c in cases] == theirs
    quantized = {c["name"] for c, t in zip(cases, theirs) if t["quantized"]}
    assert not any(n.endswith(("qkv_proj", "g_proj")) for n in quantized)
    assert "model.fc" in quantized and len(quantized) == 9
