"""Generate tiny Laguna DFlash draft / target checkpoints (headers + zero bytes).

The draft config's keys are the ones vLLM 0.25.1 reads for a Laguna DFlash
draft (laguna_dflash.py, laguna.py, LagunaConfig): architectures
DFlashLagunaForCausalLM, model_type laguna, draft_vocab_size, layer_types
(uniform), dflash_config.target_layer_ids / mask_token_id, and the Laguna
attention / MLP sizes. num_experts 0 makes every draft layer a dense MLP
(gate_proj / up_proj / down_proj), as the recipe's quantization targets assume.

Tensor names carry no "model." prefix (vLLM adds it). Kinds:
  bf16           poolside's unquantized FP8-target draft
  good           W4A16 (group 128, pack-quantized) of it, ignore as re: regexes
  literal        the same tensors, ignore as literal (unprefixed) names
  qkv_quantized  qkv_proj quantized too
  nvfp4_target   a good W4A16 draft, but of poolside's NVFP4-target draft
"""
import json
import os
import struct
import sys

HIDDEN = 256
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
INTER = 512
LAYERS = 2
VOCAB = 1024
TARGET_LAYERS = 4
TARGET_LAYER_IDS = [1, 2]
GROUP = 128

W4A16_GROUP = {
    "format": "pack-quantized",
    "input_activations": None,
    "output_activations": None,
    "targets": ["Linear"],
    "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": GROUP,
                "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                "symmetric": True, "type": "int"},
}
REGEX_IGNORE = ["re:.*\\.self_attn\\.qkv_proj$", "re:.*\\.self_attn\\.g_proj$"]


LITERAL_IGNORE = sorted("layers.%d.self_attn.%s" % (i, p) for i in range(LAYERS) for p in ("qkv_proj", "g_proj"))


def w4a16_quant(ignore):
    """A compressed-tensors W4A16 quantization_config with this ignore list."""
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "config_groups": {"group_0": dict(W4A16_GROUP)},
            "ignore": list(ignore), "kv_cache_scheme": None}


def draft_config(name_or_path, quant=None):
    config = {
        "_name_or_path": name_or_path,
        "architectures": ["DFlashLagunaForCausalLM"],
        "model_type": "laguna",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "gating": True,
        "qkv_bias": False,
        "attention_bias": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144,
        "sliding_window": 512,
        "layer_types": ["sliding_attention"] * LAYERS,
        "num_experts": 0,
        "mlp_only_layers": list(range(LAYERS)),
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "dflash_config": {"target_layer_ids": TARGET_LAYER_IDS, "mask_token_id": VOCAB - 1},
    }
    if quant:
        config["quantization_config"] = quant
    return config


def linear_shapes():
    """checkpoint prefix -> (out, in) of every linear layer of the draft."""
    shapes = {}
    for i in range(LAYERS):
        p = "layers.%d." % i
        shapes[p + "self_attn.qkv_proj"] = ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.o_proj"] = (HIDDEN, HEADS * HEAD_DIM)
        shapes[p + "self_attn.g_proj"] = (HEADS, HIDDEN)
        shapes[p + "mlp.gate_proj"] = (INTER, HIDDEN)
        shapes[p + "mlp.up_proj"] = (INTER, HIDDEN)
        shapes[p + "mlp.down_proj"] = (HIDDEN, INTER)
    shapes["fc"] = (HIDDEN, HIDDEN * len(TARGET_LAYER_IDS))
    return shapes


def draft_tensors(quantized=()):
    """Tensors of the draft; layers whose name ends with one of `quantized` are W4A16."""
    tensors = {}
    for name, (out, fan_in) in linear_shapes().items():
        if any(name.endswith(q) for q in quantized):
            tensors[name + ".weight_packed"] = ("I32", [out, fan_in * 4 // 32])
            tensors[name + ".weight_scale"] = ("BF16", [out, fan_in // GROUP])
            tensors[name + ".weight_shape"] = ("I64", [2])
        else:
            tensors[name + ".weight"] = ("BF16", [out, fan_in])
    for i in range(LAYERS):
        p = "layers.%d." % i
        tensors[p + "input_layernorm.weight"] = ("BF16", [HIDDEN])
        tensors[p + "post_attention_layernorm.weight"] = ("BF16", [HIDDEN])
        tensors[p + "self_attn.q_norm.weight"] = ("BF16", [HEAD_DIM])
        tensors[p + "self_attn.k_norm.weight"] = ("BF16", [HEAD_DIM])
    for i in range(len(TARGET_LAYER_IDS)):
        tensors["aux_hidden_norms.%d.weight" % i] = ("BF16", [HIDDEN])
    tensors["hidden_norm.weight"] = ("BF16", [HIDDEN])
    tensors["norm.weight"] = ("BF16", [HIDDEN])
    return tensors


QUANTIZED_BY_RECIPE = ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "fc")


_SIZES = {"I32": 4, "I64": 8, "BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def write_safetensors(path, tensors, metadata=None):
    """A safetensors file of zero bytes: tensors maps name -> (dtype, shape)."""
    header, offset = {}, 0
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        nbytes = _SIZES[dtype]
        for dim in shape:
            nbytes *= int(dim)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + offset)


def write_checkpoint(directory, config, tensors, shards=1, base_model=None):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    names = sorted(tensors)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, {"format": "pt"})
    else:
        weight_map = {}
        for index in range(shards):
            part = {n: tensors[n] for n in names[index::shards]}
            fname = "model-%05d-of-%05d.safetensors" % (index + 1, shards)
            write_safetensors(os.path.join(directory, fname), part, {"format": "pt"})
            weight_map.update({n: fname for n in part})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, handle, indent=2)
    if base_model:
        with open(os.path.join(directory, "README.md"), "w") as handle:
            handle.write("---\nlicense: other\nbase_model: %s\ntags:\n- dflash\n---\n\n# draft\n" % base_model)
    return directory


def make_draft(directory, kind="good", shards=1):
    """Write a draft of `kind` into directory and return it."""
    if kind == "bf16":
        config = draft_config("poolside/Laguna-S-2.1-DFlash-FP8")
        return write_checkpoint(directory, config, draft_tensors(), shards, "poolside/Laguna-S-2.1-FP8")
    quant = w4a16_quant(REGEX_IGNORE)
    quantized = QUANTIZED_BY_RECIPE
    source = "poolside/Laguna-S-2.1-DFlash-FP8"
    if kind == "literal":
        quant["ignore"] = list(LITERAL_IGNORE)
    elif kind == "qkv_quantized":
        quant["ignore"] = ["re:.*\\.self_attn\\.g_proj$"]
        quantized = QUANTIZED_BY_RECIPE + ("self_attn.qkv_proj",)
    elif kind == "nvfp4_target":
        source = "poolside/Laguna-S-2.1-DFlash-NVFP4"
    elif kind != "good":
        raise ValueError(kind)
    config = draft_config(source, quant)
    return write_checkpoint(directory, config, draft_tensors(quantized), shards, source)


def make_target(directory, family="FP8"):
    """A target checkpoint's config (and one tiny shard) for the pairing checks."""
    weights = {"FP8": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
               "NVFP4": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                         "symmetric": True, "dynamic": False}}[family]
    config = {
        "_name_or_path": "poolside/Laguna-S-2.1-%s" % family,
        "architectures": ["LagunaForCausalLM"], "model_type": "laguna",
        "hidden_size": HIDDEN, "vocab_size": VOCAB, "num_hidden_layers": TARGET_LAYERS,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized" if family == "FP8" else "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": dict(weights, dynamic=True)}},
            "ignore": ["lm_head", "re:.*self_attn.*"]},
    }
    return write_checkpoint(directory, config, {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN])})


if __name__ == "__main__":
    # python tests/unit/draft_fixtures.py KIND DIR  (KIND: a draft kind, or target-FP8 / target-NVFP4)
    kind, out = sys.argv[1], sys.argv[2]
    if kind.startswith("target-"):
        make_target(out, kind.split("-", 1)[1])
    else:
        make_draft(out, kind)
    print(out)
