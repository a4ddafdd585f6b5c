# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The draft's quantization as vLLM 0.25.1 applies it, and its weights.

Per linear layer vLLM builds (dflash_vllm): quantized or not and why
(quant_decision), the tensors vLLM will look up (expected_tensors) and what the
checkpoint lacks or stores otherwise (check_layer_tensors); and the rewrite of
``quantization_config.ignore`` entries vLLM would not match into ``re:``
regexes it does (rewrite_ignore, fix_ignore_config).
"""

from __future__ import annotations

import json
import re

from ansible_collections.laguna.spark.plugins.module_utils.dflash_vllm import (
    cfg, draft_linear_layers, find_matched_target, is_equal_or_regex_match, should_ignore_layer)

# Linear layers DFlash needs in BF16.
MUST_STAY_UNQUANTIZED = ("qkv_proj", "g_proj")


def describe_args(weights, fmt):
    if not weights:
        return None
    bits = weights.get("num_bits")
    kind = weights.get("type", "int")
    strategy = weights.get("strategy")
    group = weights.get("group_size")
    text = "%s%s weights" % (kind, bits)
    if strategy == "group":
        text += ", group %s" % group
    elif strategy:
        text += ", %s" % strategy
    text += ", symmetric" if weights.get("symmetric", True) else ", asymmetric"
    return "%s (%s)" % (text, fmt) if fmt else text


def scheme_name(weights, inputs):
    if not weights:
        return None
    bits = weights.get("num_bits")
    if weights.get("type") == "float" and bits == 4 and weights.get("group_size") == 16:
        return "NVFP4" if inputs else "NVFP4A16"
    if weights.get("type") == "float" and bits == 8:
        return "FP8" if inputs else "W8A16-FP8"
    return "W%sA%s" % (bits, (inputs or {}).get("num_bits", 16))


def quant_decision(layer, quant):
    """How vLLM builds one linear layer: quantized or not, and why."""
    out = {"quantized": False, "ignored_by": [], "matched_target": None, "scheme": None,
           "weights": None, "format": None, "inputs": None}
    if not quant or not layer["quantizable"]:
        return out
    if quant.get("quant_method") != "compressed-tensors":
        out["scheme"] = "unknown (%s)" % quant.get("quant_method")
        return out
    ignore = list(quant.get("ignore") or [])
    ignored, hits = should_ignore_layer(layer["name"], ignore)
    if ignored:
        out["ignored_by"] = hits
        return out
    groups = quant.get("config_groups") or {}
    target_map = {}
    for group in groups.values():
        targets = group.get("targets") or []
        if len(targets) == 1 and str(targets[0]).endswith("Attention"):
            continue  # vLLM drops attention-only groups
        for target in targets:
            target_map[target] = group
    target = find_matched_target(layer["name"], layer["cls"], list(target_map))
    if target is None:
        return out
    group = target_map[target]
    out.update(quantized=True, matched_target=target, weights=group.get("weights"),
               inputs=group.get("input_activations"),
               format=group.get("format") or quant.get("format"))
    out["scheme"] = scheme_name(out["weights"], out["inputs"])
    return out


def expected_tensors(layer, decision):
    """{suffix: (expected shape or None, dtypes or None)} vLLM will look up."""
    fan_in, fan_out = layer["in_features"], layer["out_features"]
    if not decision["quantized"]:
        want = {"weight": ([fan_out, fan_in] if fan_in else None, None)}
        if layer["bias"]:
            want["bias"] = ([fan_out], None)
        return want
    weights = decision["weights"] or {}
    if decision["format"] == "pack-quantized" and weights.get("type", "int") == "int" and not decision["inputs"]:
        bits = int(weights.get("num_bits") or 4)
        group = weights.get("group_size")
        groups = None
        if fan_in:
            groups = 1 if weights.get("strategy") == "channel" or not group or group == -1 else fan_in // int(group)
        want = {
            "weight_packed": ([fan_out, -(-fan_in * bits // 32)] if fan_in else None, ("I32",)),
            "weight_scale": ([fan_out, groups] if fan_in else None, None),
            "weight_shape": ([2], None),
        }
        if not weights.get("symmetric", True):
            want["weight_zero_point"] = (None, ("I32",))
        if weights.get("actorder") == "group":
            want["weight_g_idx"] = ([fan_in] if fan_in else None, ("I32",))
        if layer["bias"]:
            want["bias"] = ([fan_out], None)
        return want
    # Other compressed-tensors schemes: a (compressed) weight plus its scale.
    want = {"weight": (None, None), "weight_scale": (None, None)}
    if layer["bias"]:
        want["bias"] = ([fan_out], None)
    return want


def check_layer_tensors(layer, decision, tensors):
    """Problems with the checkpoint tensors of one layer (list of str)."""
    prefix = layer["checkpoint"] + "."
    present = {name[len(prefix):]: info for name, info in tensors.items()
               if name.startswith(prefix) and "." not in name[len(prefix):]}
    want = expected_tensors(layer, decision)
    problems = []
    built = ("quantized %s" % decision["scheme"]) if decision["quantized"] else "unquantized (BF16)"
    extra = sorted(set(present) - set(want))
    missing = sorted(set(want) - set(present))
    if not present:
        return ["%s: the checkpoint has no tensors for it" % layer["checkpoint"]]
    if extra:
        kind = "quantized" if "weight_packed" in present or "weight_scale" in present else "unquantized"
        problems.append(
            "%s: vLLM builds it %s, but the checkpoint stores it %s (%s): loading fails with "
            "KeyError: '%s%s'" % (layer["checkpoint"], built, kind, ", ".join(sorted(present)), prefix, extra[0]))
        return problems
    if missing:
        problems.append("%s: vLLM builds it %s and needs %s, which the checkpoint lacks"
                        % (layer["checkpoint"], built, ", ".join(prefix + m for m in missing)))
        return problems
    for suffix, (shape, dtypes) in sorted(want.items()):
        info = present[suffix]
        if shape is not None and list(info["shape"]) != list(shape):
            problems.append("%s%s has shape %s, vLLM builds %s" % (prefix, suffix, info["shape"], shape))
        if dtypes and info["dtype"] not in dtypes:
            problems.append("%s%s is %s, vLLM expects %s" % (prefix, suffix, info["dtype"], "/".join(dtypes)))
    return problems


# --------------------------------------------------------------------------
# rewriting ignore entries
# --------------------------------------------------------------------------

_LAYER_INDEX = re.compile(r"(^|\.)layers\.(\d+)\.")


def _matches_any(entry, names):
    return any(is_equal_or_regex_match(name, entry) for name in names)


def rewrite_ignore(ignore, vllm_names, checkpoint_names, num_layers):
    """Rewrite ignore entries vLLM would not match into anchored ``re:`` regexes.

    vllm_names: prefixed module names vLLM builds; checkpoint_names: the same
    modules as named in the checkpoint (what llm-compressor wrote). An entry
    already matching a vLLM name is kept. A literal that names a checkpoint
    module becomes ``re:.*\\.<suffix>$`` when the literals cover that
    projection in every layer (the recipe's form), otherwise
    ``re:(?:.*\\.)?<escaped name>$``. A ``re:`` entry that matches checkpoint
    names but no vLLM name gets an optional-prefix group in front. Entries that
    match nothing either way are kept and reported.

    Returns (new_ignore, changes, unmatched) where changes maps each old entry
    to its replacement.
    """
    new, changes, unmatched = [], {}, []
    literal_groups = {}
    for entry in ignore:
        if _matches_any(entry, vllm_names):
            continue
        if not entry.startswith("re:") and entry in checkpoint_names:
            match = _LAYER_INDEX.search(entry)
            if match:
                key = entry[match.end():]
                literal_groups.setdefault(key, set()).add(int(match.group(2)))
    complete = {key for key, seen in literal_groups.items() if num_layers and seen >= set(range(num_layers))}
    for entry in ignore:
        if _matches_any(entry, vllm_names):
            replacement = entry
        elif not entry.startswith("re:") and entry in checkpoint_names:
            match = _LAYER_INDEX.search(entry)
            if match and entry[match.end():] in complete:
                replacement = "re:.*\\." + re.escape(entry[match.end():]).replace("\\_", "_") + "$"
            else:
                replacement = "re:(?:.*\\.)?" + re.escape(entry).replace("\\_", "_") + "$"
        elif entry.startswith("re:") and _matches_any(entry, checkpoint_names):
            pattern = entry[3:]
            if pattern.startswith("^"):
                pattern = pattern[1:]
            replacement = "re:(?:.*\\.)?" + pattern
            if not _matches_any(replacement, vllm_names):
                unmatched.append(entry)
                replacement = entry
        else:
            unmatched.append(entry)
            replacement = entry
        if replacement != entry:
            changes[entry] = replacement
        if replacement not in new:
            new.append(replacement)
    return new, changes, unmatched


def fix_ignore_config(config):
    """Return (new_config, changes, unmatched) for a draft config dict."""
    quant = config.get("quantization_config")
    if not quant or quant.get("quant_method") != "compressed-tensors":
        return config, {}, []
    layers = draft_linear_layers(config)
    vllm_names = [layer["name"] for layer in layers] + ["lm_head"]
    checkpoint_names = [layer["checkpoint"] for layer in layers] + ["lm_head"]
    ignore = list(quant.get("ignore") or [])
    new_ignore, changes, unmatched = rewrite_ignore(ignore, vllm_names, checkpoint_names,
                                                    int(cfg(config, "num_hidden_layers")))
    if new_ignore == ignore:
        return config, {}, unmatched
    new_config = json.loads(json.dumps(config))
    new_config["quantization_config"]["ignore"] = new_ignore
    return new_config, changes, unmatched


def rebuild_reasons(report, card_text, source_repo, force=False):
    """Why the draft_quant role rebuilds the W4A16 draft ([] when it keeps it).

    ``report`` is the dflash_draft_info result of the existing output (ok,
    quantized_layers), ``card_text`` its README.md (empty when there is none):
    a draft that does not load, has no quantized layer, or whose model card
    does not name ``source_repo`` as its base_model is rebuilt, and so is any
    draft with ``force``.
    """
    report = report or {}
    reasons = []
    if force:
        reasons.append("draft_quant_force is true")
    if not report.get("ok"):
        reasons.append("the existing draft does not load as vLLM 0.25.1 would load it (or there is none)")
    if not report.get("quantized_layers"):
        reasons.append("the existing draft has no quantized layer")
    if ("base_model: %s" % source_repo) not in (card_text or ""):
        reasons.append("its model card does not name %s as its base_model" % source_repo)
    return reasons
