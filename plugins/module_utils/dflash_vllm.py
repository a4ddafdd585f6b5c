# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What vLLM 0.25.1 builds for a Laguna DFlash draft, and how it matches names.

Read from ``vllm/model_executor/models/laguna_dflash.py`` and ``laguna.py``
(missing config keys take vLLM's ``LagunaConfig`` defaults, LAGUNA_DEFAULTS):

* ``DFlashLagunaForCausalLM`` (``EAGLEConfig`` prefixes ``DFlash`` to a
  ``LagunaForCausalLM`` architecture, so either name loads). It requires
  ``draft_vocab_size`` equal to the target's vocabulary (the draft shares the
  target's ``lm_head`` and ``embed_tokens``), ``dflash_config.target_layer_ids``
  (non-empty) and a uniform ``layer_types`` of length ``num_hidden_layers``.
* The inner model is built with the fixed prefix ``model``: the linear layers
  are ``model.layers.<i>.self_attn.qkv_proj`` (QKVParallelLinear),
  ``...self_attn.o_proj`` (RowParallelLinear), ``...self_attn.g_proj``
  (ColumnParallelLinear, when ``gating``), ``...mlp.gate_proj`` /
  ``up_proj`` (ColumnParallelLinear, not merged) / ``down_proj``
  (RowParallelLinear) for dense layers, and ``model.fc`` (ReplicatedLinear,
  input = target hidden size x len(target_layer_ids)). ``lm_head`` and
  ``embed_tokens`` get no quant config.
* The checkpoint's tensor names carry no ``model.`` prefix
  (``layers.0.self_attn.qkv_proj.weight``): ``load_weights`` adds it, and
  ``DFlashLagunaModel.load_weights`` looks every name up directly in its
  parameters (no q/k/v stacking), so a name vLLM did not build is a KeyError.
* The draft's quant config comes from ``get_draft_quant_config`` (a fresh
  ``CompressedTensorsConfig``); ``DFlashLagunaForCausalLM`` defines no
  ``packed_modules_mapping``, so no fused-shard expansion applies to the draft.
  ``should_ignore_layer`` / ``find_matched_target`` then decide per prefix:
  an ``ignore`` or ``targets`` entry matches when it equals the full prefixed
  name, or, written ``re:<pattern>``, when ``regex.match`` (anchored at the
  start only) matches it; targets also match a substring of the module's class
  name (``Linear`` matches ``QKVParallelLinear``).
* DFlash slices ``qkv_proj.weight`` directly when it builds its context-KV
  buffers, so a quantized qkv_proj fails with AttributeError; the recipe keeps
  ``g_proj`` in BF16 as well.
"""

from __future__ import annotations

import re

try:  # vLLM matches with the third-party "regex" module; fall back to re.
    import regex as _re_impl  # pylint: disable=import-error
except ImportError:  # pragma: no cover - depends on the environment
    _re_impl = re

# vLLM's LagunaConfig defaults for the keys this module reads.
LAGUNA_DEFAULTS = {
    "vocab_size": 100352, "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 40, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "qkv_bias": False, "attention_bias": False, "gating": True,
    "num_experts": 256, "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1, "mlp_only_layers": [0],
}


# --------------------------------------------------------------------------
# vLLM's matching rules (compressed_tensors/utils.py), re-implemented
# --------------------------------------------------------------------------

def is_equal_or_regex_match(value, target, check_contains=False):
    """vLLM's ``_is_equal_or_regex_match``: "re:" -> regex.match, else equality
    (or, with check_contains, case-insensitive substring)."""
    if target.startswith("re:"):
        return _re_impl.match(target[3:], value) is not None
    if check_contains:
        return target.lower() in value.lower()
    return target == value


def should_ignore_layer(layer_name, ignore, fused_mapping=None):
    """vLLM's ``should_ignore_layer``; returns the deciding entries too.

    Returns ``(ignored, entries)`` where entries are the ignore entries that
    matched. Raises ValueError when the shards of a fused layer disagree, as
    vLLM does.
    """
    fused_mapping = fused_mapping or {}
    if layer_name is None:
        return False, []
    proj = layer_name.split(".")[-1]
    if proj in fused_mapping and layer_name not in ignore:
        decision = None
        entries = []
        for shard in fused_mapping[proj]:
            shard_name = layer_name.replace(proj, shard)
            hits = [t for t in ignore if is_equal_or_regex_match(shard_name, t)]
            hit = bool(hits)
            entries.extend(hits)
            if decision is None:
                decision = hit
            elif hit != decision:
                raise ValueError("Found a different quantization schemes for %s in %s. vLLM "
                                 "requires all to use the same scheme." % (fused_mapping[proj], layer_name))
        return bool(decision), sorted(set(entries))
    hits = [t for t in ignore if is_equal_or_regex_match(layer_name, t)]
    return bool(hits), hits


def find_matched_target(layer_name, class_name, targets, fused_mapping=None):
    """vLLM's ``find_matched_target``: layer name, then class name (substring),
    then fused shards (all must match)."""
    fused_mapping = fused_mapping or {}
    layer_name = layer_name or ""
    for target in targets:
        if is_equal_or_regex_match(layer_name, target):
            return target
    for target in targets:
        if is_equal_or_regex_match(class_name, target, check_contains=True):
            return target
    fused = next((key for key in fused_mapping if layer_name.endswith(key)), None)
    if fused is None:
        return None
    matches = []
    for unfused in (layer_name.replace(fused, part) for part in fused_mapping[fused]):
        matches.append(next((t for t in targets if is_equal_or_regex_match(unfused, t)), None))
    return matches[0] if all(matches) else None


# --------------------------------------------------------------------------
# What vLLM builds for the draft
# --------------------------------------------------------------------------

def cfg(config, key):
    value = config.get(key)
    return LAGUNA_DEFAULTS.get(key) if value is None else value


def draft_linear_layers(config, target_hidden_size=None):
    """The linear layers vLLM 0.25.1 builds for a Laguna DFlash draft.

    Each is a dict: name (vLLM prefix), checkpoint (tensor prefix in the
    checkpoint), cls, in_features, out_features, bias, quantizable (whether
    vLLM passes the draft's quant config to it).
    """
    hidden = int(cfg(config, "hidden_size"))
    layers = []
    per_layer_heads = config.get("num_attention_heads_per_layer")
    mlp_only = cfg(config, "mlp_only_layers") or []
    dflash = config.get("dflash_config") or {}
    n_features = len(dflash.get("target_layer_ids") or []) or None

    def add(name, cls, fan_in, fan_out, bias=False, quantizable=True):
        layers.append({"name": "model." + name, "checkpoint": name, "cls": cls,
                       "in_features": fan_in, "out_features": fan_out, "bias": bool(bias),
                       "quantizable": quantizable})

    for index in range(int(cfg(config, "num_hidden_layers"))):
        heads = int(per_layer_heads[index]) if per_layer_heads else int(cfg(config, "num_attention_heads"))
        kv_heads = int(cfg(config, "num_key_value_heads"))
        head_dim = int(config.get("head_dim") or LAGUNA_DEFAULTS["head_dim"] or hidden // heads)
        prefix = "layers.%d" % index
        add(prefix + ".self_attn.qkv_proj", "QKVParallelLinear", hidden,
            (heads + 2 * kv_heads) * head_dim, cfg(config, "qkv_bias"))
        add(prefix + ".self_attn.o_proj", "RowParallelLinear", heads * head_dim, hidden,
            cfg(config, "attention_bias"))
        gating = cfg(config, "gating")
        if gating:
            per_head = gating is True or gating == "per-head"
            add(prefix + ".self_attn.g_proj", "ColumnParallelLinear", hidden,
                heads if per_head else heads * head_dim)
        moe = (index not in mlp_only and int(cfg(config, "num_experts")) > 0
               and (index + 1) % int(cfg(config, "decoder_sparse_step")) == 0)
        if moe:
            add(prefix + ".mlp.gate", "ReplicatedLinear", hidden, int(cfg(config, "num_experts")),
                quantizable=False)
            shared = int(cfg(config, "shared_expert_intermediate_size"))
            if shared > 0:
                add(prefix + ".mlp.shared_expert.gate_proj", "ColumnParallelLinear", hidden, shared)
                add(prefix + ".mlp.shared_expert.up_proj", "ColumnParallelLinear", hidden, shared)
                add(prefix + ".mlp.shared_expert.down_proj", "RowParallelLinear", shared, hidden)
        else:
            inter = int(cfg(config, "intermediate_size"))
            add(prefix + ".mlp.gate_proj", "ColumnParallelLinear", hidden, inter)
            add(prefix + ".mlp.up_proj", "ColumnParallelLinear", hidden, inter)
            add(prefix + ".mlp.down_proj", "RowParallelLinear", inter, hidden)
    fc_in = target_hidden_size * n_features if (target_hidden_size and n_features) else None
    add("fc", "ReplicatedLinear", fc_in, hidden)
    return layers


def is_moe_draft(config):
    mlp_only = cfg(config, "mlp_only_layers") or []
    return any(index not in mlp_only and int(cfg(config, "num_experts")) > 0
               and (index + 1) % int(cfg(config, "decoder_sparse_step")) == 0
               for index in range(int(cfg(config, "num_hidden_layers"))))
