"""dflash_draft_info / dflash_draft_ignore on generated DFlash draft checkpoints."""
import json
import os
import struct

import pytest

from helpers import draft_fixtures as fx
from ansible_collections.laguna.spark.plugins.module_utils import dflash_draft as dd
from ansible_collections.laguna.spark.plugins.module_utils import dflash_config as dconfig
from ansible_collections.laguna.spark.plugins.module_utils import dflash_layout as dlayout
from ansible_collections.laguna.spark.plugins.module_utils import dflash_quant as dquant
from ansible_collections.laguna.spark.plugins.module_utils import dflash_vllm as dvllm
from ansible_collections.laguna.spark.plugins.modules import dflash_draft_ignore, dflash_draft_info


@pytest.fixture
def target(tmp_path):
    return fx.make_target(str(tmp_path / "Laguna-S-2.1-FP8"), "FP8")


def draft(tmp_path, kind, shards=1):
    return fx.make_draft(str(tmp_path / ("draft-" + kind)), kind, shards)


# --- safetensors headers -----------------------------------------------------

def test_header_round_trip_and_truncation(tmp_path):
    path = str(tmp_path / "a.safetensors")
    fx.write_safetensors(path, {"x.weight": ("BF16", [4, 8]), "y": ("I32", [3])}, {"format": "pt"})
    tensors, meta = dlayout.read_safetensors_header(path)
    assert tensors["x.weight"]["shape"] == [4, 8] and tensors["y"]["dtype"] == "I32"
    assert meta == {"format": "pt"}
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 1)
    with pytest.raises(dlayout.DraftError, match="truncated"):
        dlayout.read_safetensors_header(path)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", 1 << 40))
    with pytest.raises(dlayout.DraftError, match="does not fit"):
        dlayout.read_safetensors_header(path)


def test_sharded_index_is_read(tmp_path):
    path = draft(tmp_path, "good", shards=3)
    tensors = dlayout.read_tensors(path)
    assert tensors["layers.1.mlp.down_proj.weight_packed"]["shape"] == [fx.HIDDEN, fx.INTER // 8]
    assert len({t["file"] for t in tensors.values()}) == 3


# --- vLLM's build and matching -------------------------------------------------

def test_layer_names_are_vllm_prefixed():
    layers = dvllm.draft_linear_layers(fx.draft_config("x"), target_hidden_size=fx.HIDDEN)
    names = [l["name"] for l in layers]
    assert names[:6] == ["model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
                         "model.layers.0.self_attn.g_proj", "model.layers.0.mlp.gate_proj",
                         "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"]
    assert names[-1] == "model.fc"
    fc = layers[-1]
    assert (fc["in_features"], fc["out_features"]) == (fx.HIDDEN * len(fx.TARGET_LAYER_IDS), fx.HIDDEN)
    qkv = layers[0]
    assert qkv["out_features"] == (fx.HEADS + 2 * fx.KV_HEADS) * fx.HEAD_DIM
    assert layers[2]["out_features"] == fx.HEADS  # per-head gate


@pytest.mark.parametrize("entry, name, expected", [
    ("layers.0.self_attn.g_proj", "model.layers.0.self_attn.g_proj", False),   # literal, unprefixed
    ("model.layers.0.self_attn.g_proj", "model.layers.0.self_attn.g_proj", True),
    ("re:.*\\.self_attn\\.g_proj$", "model.layers.0.self_attn.g_proj", True),
    ("re:layers\\.\\d+\\.self_attn\\.g_proj$", "model.layers.0.self_attn.g_proj", False),  # match anchors at start
    ("re:.*g_proj", "model.layers.0.self_attn.g_proj_extra", True),              # no end anchor
])
def test_ignore_matching(entry, name, expected):
    assert dvllm.should_ignore_layer(name, [entry])[0] is expected


def test_target_matches_class_name_substring():
    assert dvllm.find_matched_target("model.fc", "ReplicatedLinear", ["Linear"]) == "Linear"
    assert dvllm.find_matched_target("model.fc", "ReplicatedLinear", ["re:layers\\..*"]) is None
    fused = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    # "re:.*v_proj$" would match "...qkv_proj" itself; with the dot only the shards match
    targets = ["re:.*\\.q_proj$", "re:.*\\.k_proj$", "re:.*\\.v_proj$"]
    assert dvllm.find_matched_target("model.layers.0.self_attn.qkv_proj", "QKVParallelLinear", targets, fused) \
        == "re:.*\\.q_proj$"
    assert dvllm.find_matched_target("model.layers.0.self_attn.qkv_proj", "QKVParallelLinear", targets[:2], fused) is None
    with pytest.raises(ValueError, match="different quantization schemes"):
        dvllm.should_ignore_layer("model.layers.0.self_attn.qkv_proj", ["re:.*q_proj$"], fused)


# --- the four drafts -------------------------------------------------------------

def test_good_w4a16_draft(tmp_path, target):
    report = dd.inspect(draft(tmp_path, "good", shards=2), target)
    assert report["ok"], report["problems"]
    assert report["method"] == "dflash" and report["vllm_architecture"] == "DFlashLagunaForCausalLM"
    assert report["built_for"]["family"] == "FP8" and report["target"]["family"] == "FP8"
    assert report["pairing"] == {"hidden_size_match": True, "vocab_match": True, "shares_lm_head": True,
                                 "family_match": True, "target_layers_in_range": True}
    assert report["quantization"]["schemes"] == ["W4A16"]
    by_name = {l["name"]: l for l in report["layers"]}
    assert not by_name["model.layers.0.self_attn.qkv_proj"]["quantized"]
    assert by_name["model.layers.0.self_attn.qkv_proj"]["ignored_by"] == ["re:.*\\.self_attn\\.qkv_proj$"]
    assert not by_name["model.layers.1.self_attn.g_proj"]["quantized"]
    assert by_name["model.fc"]["quantized"] and by_name["model.fc"]["scheme"] == "W4A16"
    assert len(report["quantized_layers"]) == 9


def test_unquantized_fp8_target_draft(tmp_path, target):
    report = dd.inspect(draft(tmp_path, "bf16"), target)
    assert report["ok"], report["problems"]
    assert report["quantization"] is None and report["quantized_layers"] == []


def test_literal_ignore_names_fail_with_keyerror(tmp_path, target):
    report = dd.inspect(draft(tmp_path, "literal"), target)
    assert not report["ok"]
    text = "\n".join(report["problems"])
    assert "KeyError: 'layers.0.self_attn.g_proj.weight'" in text
    assert "model.layers.1.self_attn.qkv_proj: vLLM will build it quantized" in text
    assert "does not match the prefixed name" in text
    assert set(report["quantization"]["unmatched_ignore"]) == {
        "layers.%d.self_attn.%s" % (i, p) for i in range(2) for p in ("qkv_proj", "g_proj")}


def test_quantized_qkv_proj_fails(tmp_path, target):
    report = dd.inspect(draft(tmp_path, "qkv_quantized"), target)
    assert not report["ok"]
    assert any(p.startswith("model.layers.0.self_attn.qkv_proj: vLLM will build it quantized")
               and "AttributeError" in p for p in report["problems"])
    # g_proj is correctly ignored; only the two qkv_proj are wrong
    assert len(report["problems"]) == 2


def test_nvfp4_target_draft_on_fp8_target(tmp_path, target):
    report = dd.inspect(draft(tmp_path, "nvfp4_target"), target)
    assert not report["ok"]
    assert report["built_for"] == {"family": "NVFP4", "source": "README.md base_model",
                                   "name": "poolside/Laguna-S-2.1-DFlash-NVFP4"}
    assert report["pairing"]["family_match"] is False
    assert "0% acceptance" in report["problems"][0]
    nvfp4 = fx.make_target(str(tmp_path / "Laguna-S-2.1-NVFP4"), "NVFP4")
    assert dd.inspect(draft(tmp_path, "nvfp4_target"), nvfp4)["ok"]


def test_family_sources():
    assert dconfig.family_from_name("sapidlabs/Sparkulator-Laguna-S-2.1-NVFP4") == "NVFP4"
    assert dconfig.family_from_name("poolside/Laguna-S-2.1-DFlash-W4A16") is None  # W4A16 is the draft's own
    assert dconfig.family_from_name("Laguna-S-2.1-DFlash-FP8") == "FP8"
    assert dconfig.family_from_quant({"quant_method": "fp8"}) == "FP8"
    assert dconfig.family_from_quant(None) == "BF16"


def test_vocab_hidden_and_prefix_mismatches(tmp_path, target):
    path = draft(tmp_path, "good")
    config = json.load(open(os.path.join(path, "config.json")))
    config["draft_vocab_size"] = 2048
    config["layer_types"] = ["sliding_attention", "full_attention"]
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    text = "\n".join(dd.inspect(path, target)["problems"])
    assert "draft_vocab_size 2048 differs from the target's vocab_size 1024" in text
    assert "layer_types must be uniform" in text


def test_checkpoint_targets_vllm_does_not_match(tmp_path, target):
    """Targets written unprefixed: vLLM builds o_proj unquantized, the checkpoint has weight_packed."""
    path = draft(tmp_path, "good")
    config = json.load(open(os.path.join(path, "config.json")))
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = [
        "re:layers\\.\\d+\\.self_attn\\.o_proj", "re:layers\\.\\d+\\.mlp\\..*", "fc"]
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    report = dd.inspect(path, target)
    assert report["quantized_layers"] == []
    assert any("KeyError: 'layers.0.self_attn.o_proj.weight_packed'" in p or
               "KeyError: 'layers.0.self_attn.o_proj.weight_" in p for p in report["problems"])


# --- the ignore rewrite ----------------------------------------------------------

def test_rewrite_collapses_full_layer_sets_and_escapes_partial_ones():
    config = fx.draft_config("x", {"quant_method": "compressed-tensors", "config_groups": {},
                                   "ignore": ["layers.0.self_attn.qkv_proj", "layers.1.self_attn.qkv_proj",
                                              "layers.0.self_attn.g_proj", "lm_head", "fc",
                                              "re:layers\\.\\d+\\.mlp\\.down_proj$", "SomeNorm"]})
    new, changes, unmatched = dquant.fix_ignore_config(config)
    ignore = new["quantization_config"]["ignore"]
    assert ignore == ["re:.*\\.self_attn\\.qkv_proj$", "re:(?:.*\\.)?layers\\.0\\.self_attn\\.g_proj$",
                      "lm_head", "re:(?:.*\\.)?fc$", "re:(?:.*\\.)?layers\\.\\d+\\.mlp\\.down_proj$", "SomeNorm"]
    assert unmatched == ["SomeNorm"]
    assert changes["fc"] == "re:(?:.*\\.)?fc$"
    for entry in ignore[:-1]:
        assert any(dvllm.is_equal_or_regex_match(n, entry) for n in
                   ["model.layers.0.self_attn.g_proj", "model.layers.1.self_attn.qkv_proj", "lm_head",
                    "model.fc", "model.layers.1.mlp.down_proj"])
    assert not dvllm.should_ignore_layer("model.layers.1.self_attn.g_proj", ignore)[0]
    again, changes2, _unmatched = dquant.fix_ignore_config(new)
    assert changes2 == {} and again == new


# --- the modules ------------------------------------------------------------------

def test_info_module_fails_before_start(run_module, tmp_path, target):
    result = run_module(dflash_draft_info, {"path": draft(tmp_path, "literal"), "target_path": target})
    assert result.failed and "will not work" in result["msg"] and "KeyError" in result["msg"]
    result = run_module(dflash_draft_info, {"path": draft(tmp_path, "literal"), "target_path": target,
                                            "fail_on_problems": False})
    assert not result.failed and result["ok"] is False and len(result["problems"]) == 8
    result = run_module(dflash_draft_info, {"path": draft(tmp_path, "good"), "target_path": target},
                        check_mode=True)
    assert not result.failed and result["ok"] and result["changed"] is False and result["exists"]


def test_info_module_missing_draft(run_module, tmp_path):
    result = run_module(dflash_draft_info, {"path": str(tmp_path / "nope"), "fail_on_problems": False})
    assert result["ok"] is False and result["exists"] is False and "no config.json" in result["problems"][0]


def test_ignore_module_check_diff_backup_idempotent(run_module, tmp_path, target):
    path = draft(tmp_path, "literal")
    config_path = os.path.join(path, "config.json")
    before = open(config_path).read()
    result = run_module(dflash_draft_ignore, {"path": path}, check_mode=True, diff=True)
    assert result["changed"] and "layers.0.self_attn.g_proj" in result["diff"]["before"]
    assert "re:.*\\\\.self_attn\\\\.g_proj$" in result["diff"]["after"]
    assert open(config_path).read() == before
    result = run_module(dflash_draft_ignore, {"path": path})
    assert result["changed"] and os.path.isfile(result["backup_file"])
    assert open(result["backup_file"]).read() == before
    assert result["ignore"] == ["re:.*\\.self_attn\\.g_proj$", "re:.*\\.self_attn\\.qkv_proj$"]
    assert dd.inspect(path, target)["ok"]
    again = run_module(dflash_draft_ignore, {"path": path})
    assert not again["changed"] and "backup_file" not in again


def test_hint_sentence(tmp_path, target):
    hint = dd.hint_sentence(dd.inspect(draft(tmp_path, "nvfp4_target"), target), "/d", "org/d", "/t")
    assert hint.startswith("Draft /d (org/d) is DFlashLagunaForCausalLM, built for the NVFP4 target (")
    assert "served with /t (FP8)." in hint and "0% acceptance" in hint


def test_a_recorded_rewrite_still_verifies_against_the_hub_and_nothing_else_does(run_module, tmp_path):
    """dflash_draft_ignore records its rewrite in the node's checksum record:
    model_verify then accepts the rewritten config.json against the Hub's
    published digest (hashing nothing again), but not a config.json changed
    any other way, and not when the Hub publishes another file."""
    from ansible_collections.laguna.spark.plugins.module_utils import hashcache
    from ansible_collections.laguna.spark.plugins.modules import model_verify
    path = draft(tmp_path, "literal")
    config_path = os.path.join(path, "config.json")
    sha, oid = hashcache.digest_bytes(open(config_path, "rb").read())
    published = {rel: {"size": os.path.getsize(os.path.join(path, rel))} for rel in os.listdir(path)}
    for rel in published:
        published[rel]["git_oid"] = hashcache.hash_file(os.path.join(path, rel))[1]
    published["config.json"]["git_oid"] = oid   # regular files: the Hub publishes git blob ids
    record = str(tmp_path / "cache" / "sha256.json")
    args = {"path": path, "expected": published, "hash_cache": record, "expected_shards": 1,
            "extras": "ignore"}

    result = run_module(dflash_draft_ignore, {"path": path, "backup": False, "hash_cache": record})
    assert result["changed"] and result["recorded"]
    assert json.load(open(record))["rewrites"][os.path.abspath(config_path)]["from"] == {"sha256": sha, "git_oid": oid}
    first = run_module(model_verify, args)
    assert first["complete"] and first["rewritten"] == ["config.json"], first["problems"]
    assert "config.json" not in " ".join(h["path"] for h in first["hashed"])  # the module recorded its digest
    assert not run_module(dflash_draft_ignore, {"path": path, "backup": False, "hash_cache": record})["changed"]
    again = run_module(model_verify, args)
    assert again["complete"] and again["hashed"] == []

    # Another Hub revision of config.json: the record is of another file.
    other = dict(args, expected=dict(published, **{"config.json": {"size": 10, "git_oid": "0" * 40}}))
    assert run_module(model_verify, other, check_mode=True)["refetch"] == ["config.json"]
    # Any other change to the rewritten file fails, and repair removes it with its record.
    with open(config_path, "a") as handle:
        handle.write(" ")
    bad = run_module(model_verify, dict(args, repair=True))
    assert not bad["complete"] and bad["removed"] == ["config.json"]
    assert os.path.abspath(config_path) not in json.load(open(record)).get("rewrites", {})


def test_module_returns_the_pairing_hint_the_acceptance_failure_prints(run_module, tmp_path, target):
    path = draft(tmp_path, "nvfp4_target")
    result = run_module(dflash_draft_info, {"path": path, "target_path": target,
                                            "draft_repo": "poolside/Laguna-S-2.1-DFlash-NVFP4", "fail_on_problems": False})
    assert result["pairing_hint"].startswith("Draft %s (poolside/Laguna-S-2.1-DFlash-NVFP4) is " % path)
    assert "built for the NVFP4 target" in result["pairing_hint"]
    assert "served with %s (FP8). dflash_draft_info: " % target in result["pairing_hint"]
    good = run_module(dflash_draft_info, {"path": draft(tmp_path, "good"), "target_path": target})
    assert "The precisions match: DFlash drafts also pair with one model" in good["pairing_hint"]
    missing = run_module(dflash_draft_info, {"path": str(tmp_path / "nope"), "fail_on_problems": False})
    assert missing["pairing_hint"].startswith("Draft %s is unreadable" % (tmp_path / "nope"))


def test_the_acceptance_failure_prints_the_hint_of_the_inspection_that_ran():
    """vllm_serve's draft_pairing_hint.yml inspects the draft again only when draft_check.yml did not."""
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel
    ran, earlier = {"changed": False, "pairing_hint": "Draft /d is built for NVFP4."}, {"pairing_hint": "Earlier."}
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    own, reused, none, nothing_ran, bad = run_filter("draft_pairing_hint", "draft_pairing_hint", [
        [ran, None], [skipped, earlier], [{"changed": False}], [skipped, None], ["hint"]])
    assert (own, reused, none) == ("Draft /d is built for NVFP4.", "Earlier.", "")
    assert "draft_pairing_hint: the inspection was skipped and no earlier one was given" in nothing_ran
    assert "draft_pairing_hint: the input must be a dflash_draft_info result" in bad


# --- the draft_quant role's rebuild decision (filter draft_quant_rebuild) ---------------------------

SOURCE = "z-lab/Laguna-S-2.1-DFlash"
CARD = "---\nbase_model: %s\ntags:\n- dflash\n---\n\n# W4A16\n" % SOURCE
GOOD = {"ok": True, "exists": True, "quantized_layers": ["layers.0.mlp.down_proj"]}


def test_a_loading_quantized_draft_made_from_the_source_is_kept():
    assert dquant.rebuild_reasons(GOOD, CARD, SOURCE) == []


@pytest.mark.parametrize("report, card, force, reason", [
    (GOOD, CARD, True, "draft_quant_force is true"),
    (dict(GOOD, ok=False), CARD, False, "does not load"),
    ({"ok": False, "exists": False}, "", False, "does not load"),
    (dict(GOOD, quantized_layers=[]), CARD, False, "no quantized layer"),
    (GOOD, CARD.replace(SOURCE, "poolside/other-draft"), False, "does not name %s" % SOURCE),
    (GOOD, "", False, "does not name %s" % SOURCE),
])
def test_each_reason_alone_rebuilds(report, card, force, reason):
    reasons = dquant.rebuild_reasons(report, card, SOURCE, force)
    assert len(reasons) == 1 or not report.get("exists", True), reasons
    assert any(reason in r for r in reasons), reasons


def test_the_rebuild_filter_reads_the_model_cards_slurp():
    import base64  # pylint: disable=import-outside-toplevel
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel

    slurped = {"content": base64.b64encode(CARD.encode()).decode(), "encoding": "base64"}
    kept, no_card, skipped, bad = run_filter("draft_quant_rebuild", "draft_quant_rebuild", [
        {"args": [GOOD], "kwargs": {"card": slurped, "source_repo": SOURCE}},
        {"args": [GOOD], "kwargs": {"card": {"failed": False, "msg": "file not found"}, "source_repo": SOURCE}},
        {"args": [{"ok": False, "exists": False}], "kwargs": {"card": {"skipped": True}, "source_repo": SOURCE}},
        {"args": ["ok"], "kwargs": {"card": slurped, "source_repo": SOURCE}}])
    assert kept == {"needed": False, "reasons": []}
    assert no_card["needed"] and no_card["reasons"] == ["its model card does not name %s as its base_model" % SOURCE]
    assert skipped["needed"] and len(skipped["reasons"]) == 3
    assert "draft_quant_rebuild: the input must be a dflash_draft_info result" in bad
