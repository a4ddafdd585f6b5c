"""The draft_quant role really runs llm-compressor (CPU, data-free) on a tiny
generated DFlash draft, and the result passes dflash_draft_info.

The quantization venv (the role's pinned packages, ~1.5 GB, ~2 minutes to
build from the wheels pip finds) is cached in .cache/draft-quant-venv (or
$LAGUNA_DRAFT_QUANT_VENV) and handed to the role, whose pip task then only
confirms the pins.
"""
import getpass
import glob
import json
import os
import re
import signal
import subprocess

import pytest
import yaml

from helpers import ROOT, draft_fixtures as fx, interrupt
from ansible_collections.laguna.spark.plugins.module_utils import dflash_draft as dd  # noqa: E402
from ansible_collections.laguna.spark.plugins.module_utils import dflash_layout as dlayout  # noqa: E402

pytestmark = pytest.mark.integration

DEFAULTS = os.path.join(ROOT, "roles", "draft_quant", "defaults", "main.yml")


@pytest.fixture(scope="module")
def quant_venv():
    with open(DEFAULTS) as handle:
        pins = yaml.safe_load(handle)["draft_quant_packages"]
    venv = os.environ.get("LAGUNA_DRAFT_QUANT_VENV") or os.path.join(ROOT, ".cache", "draft-quant-venv")
    stamp = os.path.join(venv, "laguna-pins.json")
    if os.path.isfile(stamp) and json.load(open(stamp)) == pins:
        return venv
    subprocess.run(["python3", "-m", "venv", "--clear", venv], check=True)
    done = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q"] + pins,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail("cannot install %s: %s" % (pins, done.stderr[-2000:]))
    with open(stamp, "w") as handle:
        json.dump(pins, handle)
    return venv


def test_role_quantizes_checks_and_is_idempotent(runner, tmp_path, quant_venv):
    source = fx.make_draft(str(tmp_path / "Laguna-S-2.1-DFlash-FP8"), "bf16")
    target = fx.make_target(str(tmp_path / "Laguna-S-2.1-FP8"), "FP8")
    output = str(tmp_path / "Laguna-S-2.1-DFlash-W4A16")
    extravars = {"draft_quant_source_path": source, "draft_quant_output_path": output,
                 "draft_quant_venv": quant_venv, "draft_quant_download": False,
                 "laguna_model_path": target}

    check = runner.include_role("draft_quant", extravars, cmdline="--check")
    assert check.rc == 0, check.flat[-3000:]
    assert not os.path.exists(output)

    first = runner.include_role("draft_quant", extravars)
    assert first.rc == 0, first.flat[-3000:]
    report = dd.inspect(output, target)
    assert report["ok"], report["problems"]
    assert report["warnings"] == []
    assert report["quantization"]["ignore"] == ["re:.*\\.self_attn\\.g_proj$", "re:.*\\.self_attn\\.qkv_proj$"]
    assert report["quantization"]["description"] == "int4 weights, group 128, symmetric (pack-quantized)"
    assert sorted(report["quantized_layers"]) == sorted(
        ["model.layers.%d.%s" % (i, p) for i in range(fx.LAYERS)
         for p in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")] + ["model.fc"])
    tensors = dlayout.read_tensors(output)
    assert tensors["layers.1.self_attn.qkv_proj.weight"]["dtype"] == "BF16"
    assert tensors["layers.1.self_attn.g_proj.weight"]["dtype"] == "BF16"
    assert tensors["layers.0.mlp.down_proj.weight_packed"] == {"dtype": "I32", "shape": [fx.HIDDEN, fx.INTER // 8],
                                                               "file": "model.safetensors"}
    assert tensors["fc.weight_scale"]["shape"] == [fx.HIDDEN, fx.HIDDEN * len(fx.TARGET_LAYER_IDS) // 128]
    assert report["built_for"]["family"] == "FP8"  # the model card names the source
    assert "Laguna-S-2.1-FP8 is FP8" in report["summary"] or report["target"]["family"] == "FP8"

    again = runner.include_role("draft_quant", extravars)
    assert again.rc == 0, again.flat[-3000:]
    assert sum(again.stats.get("changed", {}).values()) == 0, again.flat[-3000:]


def test_ctrl_c_during_the_quantization_leaves_no_second_one(runner, tmp_path, quant_venv):
    # ansible-playbook is interrupted (SIGINT, twice) while the async
    # quantization runs; it goes on without the playbook (held with SIGSTOP
    # here, so that it is surely still there when the rerun starts). The
    # rerun stops it before quantizing, so two never write the draft at once,
    # and leaves neither a process nor a half-written work directory.
    source = fx.make_draft(str(tmp_path / "Laguna-S-2.1-DFlash-FP8"), "bf16")
    target = fx.make_target(str(tmp_path / "Laguna-S-2.1-FP8"), "FP8")
    output = str(tmp_path / "Laguna-S-2.1-DFlash-W4A16")
    extravars = {"draft_quant_source_path": source, "draft_quant_output_path": output,
                 "draft_quant_venv": quant_venv, "draft_quant_download": False, "laguna_model_path": target,
                 "laguna_user": getpass.getuser(), "laguna_sysfs_infiniband": runner.sysfs,
                 "fabric_sysfs_net": runner.sysfs_net}
    quantizer = [os.path.join(quant_venv, "bin", "python"), os.path.join(quant_venv, "quantize_draft_w4a16.py"),
                 "--source", source, "--output", output]
    interrupt.interrupted_role(tmp_path, "draft_quant", extravars, quantizer)
    orphans = interrupt.processes(quantizer)
    assert orphans, "the interrupted quantization should still run (async), or this test tests nothing"
    for pid in orphans:
        os.kill(pid, signal.SIGSTOP)
    again = runner.include_role("draft_quant", extravars)
    assert again.rc == 0, again.flat[-3000:]
    assert re.search(r"Stop a quantization an interrupted run left running[^\n]*\*+\s+changed: \[localhost\]",
                     again.text), again.text[-3000:]
    assert not interrupt.processes(quantizer)
    assert all(not os.path.exists("/proc/%d" % pid) for pid in orphans)
    assert dd.inspect(output, target)["ok"]
    assert glob.glob(os.path.join(str(tmp_path), ".draft-quant-*")) == []
    third = runner.include_role("draft_quant", extravars)
    assert third.rc == 0 and sum(third.stats.get("changed", {}).values()) == 0, third.flat[-3000:]


def test_role_refuses_a_quantized_source(runner, tmp_path, quant_venv):
    source = fx.make_draft(str(tmp_path / "Laguna-S-2.1-DFlash-FP8"), "good")
    result = runner.include_role("draft_quant", {
        "draft_quant_source_path": source, "draft_quant_output_path": str(tmp_path / "out"),
        "draft_quant_venv": quant_venv, "draft_quant_download": False,
        "laguna_model_path": str(tmp_path / "none")})
    assert result.rc != 0
    assert "is already quantized (compressed-tensors)" in result.flat


@pytest.mark.parametrize("kind, ok", [("good", True), ("literal", False), ("nvfp4_target", False)])
def test_vllm_serve_draft_check_and_hint(runner, tmp_path, kind, ok):
    """roles/vllm_serve/tasks/draft_check.yml refuses a broken or mismatched draft before the start;
    draft_pairing_hint.yml names the pairing."""
    draft = fx.make_draft(str(tmp_path / "draft"), kind)
    target = fx.make_target(str(tmp_path / "Laguna-S-2.1-FP8"), "FP8")
    extravars = {"laguna_draft_path": draft, "laguna_model_path": target,
                 "vllm_serve_draft_check": True, "vllm_serve_draft_target_family": None}
    result = runner.include_role("vllm_serve", extravars, tasks_from="draft_check")
    assert (result.rc == 0) is ok, result.flat[-3000:]
    if not ok:
        assert "will not work with" in result.flat and "vllm_serve_draft_check=false starts anyway" in result.flat
    override = runner.include_role("vllm_serve", dict(extravars, vllm_serve_draft_check=False),
                                   tasks_from="draft_check")
    assert override.rc == 0, override.flat[-3000:]
    if kind == "literal":
        return
    hint = runner.run(
        "    - ansible.builtin.include_role:\n        name: laguna.spark.vllm_serve\n"
        "        tasks_from: draft_pairing_hint\n"
        "    - ansible.builtin.debug:\n        msg: 'HINT={{ vllm_serve_draft_hint }}'\n", extravars)
    assert hint.rc == 0, hint.flat[-3000:]
    if kind == "nvfp4_target":
        assert "built for the NVFP4 target (README.md base_model)" in hint.flat
        assert "(FP8). dflash_draft_info: the draft was built for a NVFP4 target" in hint.flat
    if kind == "good":
        assert "The precisions match" in hint.flat
