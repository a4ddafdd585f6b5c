# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Inspect a Laguna DFlash draft checkpoint the way vLLM 0.25.1 will load it.

The report of dflash_draft_info (inspect) and the sentence an acceptance-0
failure gives (hint_sentence). The parts, by concern:

* dflash_layout: the checkpoint's files (config.json, the safetensors headers,
  the model card); DraftError.
* dflash_vllm: what vLLM builds for the draft and how it matches names.
* dflash_quant: the quantization vLLM applies per layer, the weights it needs,
  and the ignore-list rewrite.
* dflash_config: the target precision the draft was built for, the target's
  config.
"""

from __future__ import annotations

import os

from ansible_collections.laguna.spark.plugins.module_utils.dflash_config import draft_built_for, target_info
from ansible_collections.laguna.spark.plugins.module_utils.dflash_layout import DraftError, read_config, read_tensors
from ansible_collections.laguna.spark.plugins.module_utils.dflash_quant import (
    MUST_STAY_UNQUANTIZED, check_layer_tensors, describe_args, quant_decision, scheme_name)
from ansible_collections.laguna.spark.plugins.module_utils.dflash_vllm import (
    cfg, draft_linear_layers, is_equal_or_regex_match, is_moe_draft)


def inspect(draft_path, target_path=None, draft_repo=None, draft_target_family=None):
    """Everything dflash_draft_info returns. Raises DraftError when unreadable."""
    config = read_config(draft_path, "draft")
    tensors = read_tensors(draft_path)
    problems, warnings = [], []

    archs = config.get("architectures") or []
    arch = archs[0] if archs else None
    dflash = config.get("dflash_config") or {}
    vllm_arch = arch if arch is None or arch.startswith("DFlash") or arch.endswith("DFlash") else "DFlash" + arch
    method = "dflash" if (vllm_arch or "").startswith("DFlash") and dflash else None
    if vllm_arch != "DFlashLagunaForCausalLM":
        problems.append("architecture %s is not a Laguna DFlash draft (vLLM would build %s, "
                        "not DFlashLagunaForCausalLM): stage a DFlash draft made for Laguna" % (arch, vllm_arch))
    target_layer_ids = dflash.get("target_layer_ids") or []
    if not target_layer_ids:
        problems.append("config.json has no dflash_config.target_layer_ids: vLLM refuses the draft "
                        "(\"Laguna DFlash config requires non-empty dflash_config.target_layer_ids\")")
    num_layers = int(cfg(config, "num_hidden_layers"))
    layer_types = config.get("layer_types")
    if layer_types is None:
        problems.append("config.json has no layer_types: vLLM refuses the draft")
    elif len(layer_types) != num_layers or len(set(layer_types)) > 1:
        problems.append("layer_types must be uniform and list num_hidden_layers=%d entries, got %s"
                        % (num_layers, sorted(set(layer_types))))
    if config.get("draft_vocab_size") is None:
        problems.append("config.json has no draft_vocab_size: vLLM refuses the draft")
    if is_moe_draft(config):
        warnings.append("the draft config builds MoE layers (num_experts=%s, mlp_only_layers=%s); "
                        "their experts are not checked" % (cfg(config, "num_experts"), cfg(config, "mlp_only_layers")))

    own_lm_head = any(n == "lm_head.weight" or n.startswith("lm_head.") for n in tensors)
    own_embed = any("embed_tokens" in n for n in tensors)
    prefixed = sorted(n for n in tensors if n.startswith("model."))
    if prefixed:
        problems.append("the checkpoint's tensor names start with 'model.' (%s): vLLM adds that prefix "
                        "itself, so they load as model.model.* and fail; strip it" % prefixed[0])

    target = None
    if target_path:
        target = target_info(target_path)
    target_hidden = target["hidden_size"] if target else None
    if target_hidden is None and "fc.weight" in tensors:
        shape = tensors["fc.weight"]["shape"]
        if len(shape) == 2:
            target_hidden = shape[1] // max(1, len(target_layer_ids) or 1)

    # built-for family and pairing
    family, family_source, family_name = draft_built_for(config, draft_path, draft_repo, draft_target_family)
    pairing = {"hidden_size_match": None, "vocab_match": None, "shares_lm_head": not own_lm_head,
               "family_match": None, "target_layers_in_range": None}
    if target:
        if target["hidden_size"] is not None:
            pairing["hidden_size_match"] = target["hidden_size"] == int(cfg(config, "hidden_size"))
        if pairing["hidden_size_match"] is False:
            problems.append("the draft's hidden_size %s differs from the target's %s: it shares the target's "
                            "embed_tokens and lm_head, so it was made for another model"
                            % (cfg(config, "hidden_size"), target["hidden_size"]))
        if target["vocab_size"] is not None and config.get("draft_vocab_size") is not None:
            pairing["vocab_match"] = config.get("draft_vocab_size") == target["vocab_size"]
        if pairing["vocab_match"] is False:
            problems.append("draft_vocab_size %s differs from the target's vocab_size %s: vLLM refuses it "
                            "(the draft shares the target's lm_head)" % (config.get("draft_vocab_size"), target["vocab_size"]))
        if target["num_hidden_layers"] and target_layer_ids:
            pairing["target_layers_in_range"] = max(target_layer_ids) < int(target["num_hidden_layers"])
            if not pairing["target_layers_in_range"]:
                problems.append("dflash_config.target_layer_ids %s reach past the target's %s layers"
                                % (target_layer_ids, target["num_hidden_layers"]))
        if family and target["family"]:
            pairing["family_match"] = family == target["family"]
            if not pairing["family_match"]:
                problems.append(
                    "the draft was built for a %s target (%s: %s) but the target %s is %s: DFlash drafts are "
                    "target-precision-specific (they share the target's lm_head and are calibrated on its hidden "
                    "states), so this pairing gives 0%% acceptance; stage the DFlash draft made for the %s target"
                    % (family, family_source, family_name, target_path, target["family"], target["family"]))
        elif not family:
            warnings.append("cannot tell which target precision the draft was built for (no FP8/NVFP4/INT4/BF16 "
                            "in its verifier, model card base_model, _name_or_path, repo or directory name)")
    if own_lm_head:
        warnings.append("the draft ships its own lm_head; Laguna DFlash drafts normally share the target's")

    # quantization
    quant = config.get("quantization_config")
    layers = draft_linear_layers(config, target_hidden)
    report_layers = []
    for layer in layers:
        try:
            decision = quant_decision(layer, quant)
        except ValueError as exc:
            problems.append("%s: %s" % (layer["name"], exc))
            continue
        layer_problems = check_layer_tensors(layer, decision, tensors) if decision["scheme"] is None \
            or not str(decision["scheme"]).startswith("unknown") else []
        proj = layer["name"].split(".")[-1]
        if decision["quantized"] and proj in MUST_STAY_UNQUANTIZED:
            fix = "re:.*\\.self_attn\\.%s$" % proj
            why = {"qkv_proj": "DFlash slices qkv_proj.weight directly for its context KV, so a quantized "
                               "qkv_proj fails with AttributeError: 'QKVParallelLinear' object has no attribute 'weight'",
                   "g_proj": "the softplus gate g_proj stays BF16 in the recipe's quantization"}[proj]
            missed = [e for e in (quant or {}).get("ignore") or [] if proj in e]
            layer_problems.insert(0, (
                "%s: vLLM will build it quantized (%s, target %r)%s; %s. Keep it unquantized with %r in "
                "quantization_config.ignore (laguna.spark.dflash_draft_ignore rewrites literal entries)"
                % (layer["name"], decision["scheme"], decision["matched_target"],
                   " because ignore entry %r does not match the prefixed name" % missed[0] if missed else "",
                   why, fix)))
        problems.extend(layer_problems)
        report_layers.append({
            "name": layer["name"], "checkpoint_name": layer["checkpoint"], "cls": layer["cls"],
            "quantized": decision["quantized"], "scheme": decision["scheme"],
            "matched_target": decision["matched_target"], "ignored_by": decision["ignored_by"],
            "ok": not layer_problems, "problems": layer_problems,
        })

    ignore = list((quant or {}).get("ignore") or [])
    names = [layer["name"] for layer in layers] + ["lm_head"]
    dead = [entry for entry in ignore if not any(is_equal_or_regex_match(n, entry) for n in names)]
    if dead:
        warnings.append("quantization_config.ignore entries that match nothing vLLM builds: %s"
                        % ", ".join(dead))
    scheme = None
    if quant:
        groups = list((quant.get("config_groups") or {}).values())
        described = sorted({describe_args(g.get("weights"), g.get("format") or quant.get("format")) or "" for g in groups})
        scheme = {
            "quant_method": quant.get("quant_method"),
            "format": quant.get("format"),
            "schemes": sorted({scheme_name(g.get("weights"), g.get("input_activations")) or "" for g in groups}),
            "description": "; ".join(d for d in described if d),
            "targets": sorted({t for g in groups for t in (g.get("targets") or [])}),
            "ignore": ignore,
            "unmatched_ignore": dead,
        }
    quantized = [layer["name"] for layer in report_layers if layer["quantized"]]
    summary = "%s draft (%s), built for the %s target%s; %s; %d of %d linear layers quantized by vLLM" % (
        vllm_arch, method or "not dflash", family or "unknown", "" if not target else
        " (target %s is %s)" % (os.path.basename(os.path.normpath(target_path)), target["family"] or "unknown"),
        "unquantized" if not quant else "%s %s" % (quant.get("quant_method"), ", ".join(scheme["schemes"])),
        len(quantized), len(report_layers))
    return {
        "ok": not problems, "problems": problems, "warnings": warnings, "summary": summary,
        "architecture": arch, "vllm_architecture": vllm_arch, "method": method,
        "model_type": config.get("model_type"),
        "num_hidden_layers": num_layers, "layer_types": sorted(set(layer_types or [])),
        "hidden_size": int(cfg(config, "hidden_size")), "draft_vocab_size": config.get("draft_vocab_size"),
        "target_layer_ids": target_layer_ids, "mask_token_id": dflash.get("mask_token_id"),
        "built_for": {"family": family, "source": family_source, "name": family_name},
        "target": target, "pairing": pairing, "quantization": scheme,
        "layers": report_layers, "quantized_layers": quantized, "tensor_count": len(tensors),
    }


def hint_sentence(report, path=None, repo=None, target_path=None):
    """Sentences on the draft's pairing, for an acceptance-0 failure: what the
    draft is, the target precision it was built for (and where that was
    read), what it is served with, and what to do."""
    if not report:
        return "dflash_draft_info could not read the draft."
    built = report.get("built_for") or {}
    target = report.get("target") or {}
    text = "Draft%s%s is %s, built for the %s target (%s), served with %s (%s)." % (
        " " + path if path else "", " (%s)" % repo if repo else "",
        report.get("vllm_architecture") or "unreadable", built.get("family") or "unknown",
        built.get("source") or "no name carries a precision", target_path or "the target",
        target.get("family") or "unknown")
    if report.get("problems"):
        text += " dflash_draft_info: %s." % " | ".join(report["problems"][:3])
    elif built.get("family") and built["family"] == target.get("family"):
        text += (" The precisions match: DFlash drafts also pair with one model, so check that the draft was"
                 " made for this target.")
    else:
        text += " DFlash drafts are target-precision-specific: stage the draft made for this target's precision."
    return text


def report(draft_path, target_path=None, draft_repo=None, draft_target_family=None):
    """What dflash_draft_info returns (inspect()'s report with ``warnings_list``,
    ``exists`` and ``pairing_hint``); a draft that cannot be read is a report
    with ok false, its one problem, and ``error`` (the exception's text)."""
    exists = os.path.isfile(os.path.join(draft_path, "config.json"))
    try:
        found = inspect(draft_path, target_path, draft_repo, draft_target_family)
    except (DraftError, OSError, ValueError) as exc:
        return dict(ok=False, exists=exists, problems=[str(exc)], error=str(exc),
                    pairing_hint=hint_sentence({"problems": [str(exc)]}, draft_path, draft_repo, target_path))
    found["warnings_list"] = found.pop("warnings")
    found["exists"] = exists
    found["pairing_hint"] = hint_sentence(found, draft_path, draft_repo, target_path)
    return found
