# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Inspect a Laguna DFlash draft checkpoint the way vLLM 0.25.1 will load it.

Everything here reads ``config.json``, ``model.safetensors.index.json`` and
the safetensors *headers* (8-byte little-endian length + JSON); no torch.

What vLLM 0.25.1 builds for a Laguna DFlash draft (read from
``vllm/model_executor/models/laguna_dflash.py`` and ``laguna.py``):

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

What is inferred rather than read from vLLM: the target precision a draft was
built for is not a config key vLLM knows. It is taken from, in order, an
explicit value, ``speculators_config.verifier.name_or_path`` (the speculators
format's verifier), the model card's ``base_model`` front matter, the config's
``_name_or_path``, the repo id the draft was downloaded from, and the draft
directory's name, by the precision token they carry (FP8, NVFP4, INT4, MXFP4,
BF16), e.g. ``poolside/Laguna-S-2.1-DFlash-NVFP4``. Missing config keys take
vLLM's ``LagunaConfig`` defaults.
"""

from __future__ import annotations

import json
import os
import re
import struct

try:  # vLLM matches with the third-party "regex" module; fall back to re.
    import regex as _re_impl  # pylint: disable=import-error
except ImportError:  # pragma: no cover - depends on the environment
    _re_impl = re

HEADER_LIMIT = 100 * 1024 * 1024
INDEX_NAME = "model.safetensors.index.json"

# vLLM's LagunaConfig defaults for the keys this module reads.
LAGUNA_DEFAULTS = {
    "vocab_size": 100352, "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 40, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "qkv_bias": False, "attention_bias": False, "gating": True,
    "num_experts": 256, "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1, "mlp_only_layers": [0],
}

FAMILIES = ("NVFP4", "MXFP4", "FP8", "INT4", "INT8", "BF16")
_FAMILY_TOKEN = re.compile(r"(?i)(?:^|[-_/.\s])(NVFP4|MXFP4|FP8|INT4|INT8|BF16)(?=$|[-_/.\s])")
# Linear layers DFlash needs in BF16.
MUST_STAY_UNQUANTIZED = ("qkv_proj", "g_proj")


class DraftError(Exception):
    """The directory cannot be read as a checkpoint."""


# --------------------------------------------------------------------------
# safetensors headers
# --------------------------------------------------------------------------

def read_safetensors_header(path):
    """Return ``(tensors, metadata)`` from a safetensors file's header.

    tensors maps name -> {"dtype", "shape", "data_offsets"}. Raises DraftError
    on a truncated or malformed file.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise DraftError("%s: shorter than a safetensors header" % path)
        (length,) = struct.unpack("<Q", head)
        if length > HEADER_LIMIT or 8 + length > size:
            raise DraftError("%s: header length %d does not fit the file (%d bytes)" % (path, length, size))
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise DraftError("%s: header is not JSON: %s" % (path, exc))
    if not isinstance(header, dict):
        raise DraftError("%s: header is not a JSON object" % path)
    metadata = header.pop("__metadata__", None) or {}
    end = 0
    for name, info in header.items():
        if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
            raise DraftError("%s: tensor %s has no dtype/shape" % (path, name))
        offsets = info.get("data_offsets") or [0, 0]
        end = max(end, int(offsets[1]))
    if 8 + length + end > size:
        raise DraftError("%s: truncated (%d bytes, header says %d)" % (path, size, 8 + length + end))
    return header, metadata


def write_safetensors(path, tensors, metadata=None):
    """Write a safetensors file of zero bytes: tensors maps name -> (dtype, shape).

    Used to generate test checkpoints without torch.
    """
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
    header = {}
    offset = 0
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        count = 1
        for dim in shape:
            count *= int(dim)
        nbytes = count * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = dict(metadata)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)


def read_tensors(directory):
    """Map tensor name -> {"dtype", "shape", "file"} for a checkpoint directory."""
    index_path = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index_path):
        with open(index_path) as handle:
            weight_map = json.load(handle).get("weight_map") or {}
        files = sorted(set(weight_map.values()))
    else:
        weight_map = None
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise DraftError("%s: no *.safetensors files" % directory)
    tensors = {}
    for name in files:
        full = os.path.join(directory, name)
        if not os.path.isfile(full):
            raise DraftError("%s: the index names %s, which is missing" % (directory, name))
        header, _meta = read_safetensors_header(full)
        for tensor, info in header.items():
            tensors[tensor] = {"dtype": info["dtype"], "shape": list(info["shape"]), "file": name}
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise DraftError("%s: the index lists tensors no shard holds: %s" % (directory, ", ".join(missing[:5])))
    return tensors


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def model_card_base_models(directory):
    """``base_model`` entries of README.md's YAML front matter (a list)."""
    path = os.path.join(directory, "README.md")
    if not os.path.isfile(path):
        return []
    with open(path, errors="replace") as handle:
        text = handle.read(65536)
    match = re.match(r"---\s*\n(.*?)\n---", text, re.S)
    if not match:
        return []
    found = []
    lines = match.group(1).splitlines()
    for number, line in enumerate(lines):
        head = re.match(r"base_model\s*:\s*(.*)$", line)
        if not head:
            continue
        value = head.group(1).strip()
        if value and not value.startswith("["):
            found.append(value.strip("'\""))
        elif value.startswith("["):
            found.extend(v.strip().strip("'\"") for v in value.strip("[]").split(",") if v.strip())
        else:
            for item in lines[number + 1:]:
                entry = re.match(r"\s*-\s*(.+)$", item)
                if not entry:
                    break
                found.append(entry.group(1).strip().strip("'\""))
    return found


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
# precision families
# --------------------------------------------------------------------------

def family_from_quant(quant):
    """Precision family of a checkpoint from its quantization_config."""
    if not quant:
        return "BF16"
    method = str(quant.get("quant_method") or "").lower()
    if method == "fp8":
        return "FP8"
    if method in ("mxfp4",):
        return "MXFP4"
    if method in ("awq", "gptq", "auto-round", "autoround"):
        return "INT%s" % quant.get("bits", 4)
    if method == "modelopt" or method == "modelopt_fp4":
        algo = str(quant.get("quant_algo") or (quant.get("quantization") or {}).get("quant_algo") or "").upper()
        return "NVFP4" if "FP4" in algo else ("FP8" if "FP8" in algo else None)
    if method == "compressed-tensors":
        seen = []
        for group in (quant.get("config_groups") or {}).values():
            weights = group.get("weights") or {}
            bits, kind = weights.get("num_bits"), weights.get("type", "int")
            if kind == "float" and bits == 8:
                seen.append("FP8")
            elif kind == "float" and bits == 4:
                seen.append("NVFP4" if weights.get("group_size") == 16 else "MXFP4")
            elif kind == "int" and bits in (4, 8):
                seen.append("INT%d" % bits)
        # The "widest" precision wins for mixed configs: the experts define it.
        for family in FAMILIES:
            if family in seen:
                return family
    return None


def family_from_name(name):
    """Last precision token in a repo id or path (W4A16 etc. are not families)."""
    if not name:
        return None
    found = _FAMILY_TOKEN.findall(str(name))
    return found[-1].upper() if found else None


def draft_built_for(config, directory, draft_repo=None, explicit=None):
    """(family, source, name) of the target precision the draft was built for."""
    if explicit:
        return explicit.upper(), "draft_target_family", explicit
    candidates = []
    verifier = ((config.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    candidates.append(("speculators_config.verifier.name_or_path", verifier))
    for base in model_card_base_models(directory):
        candidates.append(("README.md base_model", base))
    candidates.append(("config.json _name_or_path", config.get("_name_or_path")))
    candidates.append(("draft_repo", draft_repo))
    candidates.append(("directory name", os.path.basename(os.path.normpath(directory))))
    for source, name in candidates:
        family = family_from_name(name)
        if family:
            return family, source, name
    return None, None, None


# --------------------------------------------------------------------------
# the whole report
# --------------------------------------------------------------------------

def _read_config(directory, what):
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise DraftError("%s has no config.json: is the %s staged there?" % (directory, what))
    try:
        return read_json(path)
    except ValueError as exc:
        raise DraftError("%s: config.json is not JSON: %s" % (directory, exc))


def target_info(target_path):
    config = _read_config(target_path, "target")
    text = config.get("text_config") or config
    quant = config.get("quantization_config") or text.get("quantization_config")
    family = family_from_quant(quant) or family_from_name(config.get("_name_or_path")) \
        or family_from_name(os.path.basename(os.path.normpath(target_path)))
    return {
        "path": target_path,
        "architectures": config.get("architectures") or [],
        "hidden_size": text.get("hidden_size"),
        "vocab_size": text.get("vocab_size"),
        "num_hidden_layers": text.get("num_hidden_layers"),
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", False)),
        "quant_method": (quant or {}).get("quant_method"),
        "family": family,
    }


def inspect(draft_path, target_path=None, draft_repo=None, draft_target_family=None):
    """Everything dflash_draft_info returns. Raises DraftError when unreadable."""
    config = _read_config(draft_path, "draft")
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
