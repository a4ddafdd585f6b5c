# Copyright: laguna-spark developers
# Apache-2.0
"""Quantize a Laguna DFlash draft to W4A16 with llm-compressor (data-free, CPU).

The draft has no transformers modeling class, so its tensors are loaded into a
plain module tree (every 2-D ``*.weight`` becomes an ``nn.Linear`` at the
same path, everything else a parameter), which llm-compressor's ``oneshot``
quantizes with a data-free ``QuantizationModifier``: int4 weights, symmetric,
one scale per ``--group-size`` inputs, 16-bit activations, saved
pack-quantized by compressed-tensors. Tensor names stay those of the source
(no ``model.`` prefix), the source config is kept and gets the
``quantization_config``, and the model card names the source as
``base_model``.

Targets are regexes over module names; each becomes ``re:(?:.*\\.)?<pattern>$``
so it matches both the checkpoint's names and vLLM's prefixed ones. The ignore
entries compressed-tensors writes are literal module names; rewrite them with
laguna.spark.dflash_draft_ignore (the draft_quant role does).
"""
import argparse
import json
import os

# Data-free and offline: nothing is fetched from a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import shutil
import signal
import sys
import tempfile

RECIPE_TARGETS = [r"layers\.\d+\.self_attn\.o_proj", r"layers\.\d+\.mlp\.(gate_proj|up_proj|down_proj)", r"fc"]
RECIPE_IGNORE = [r"re:.*\.self_attn\.qkv_proj$", r"re:.*\.self_attn\.g_proj$"]
WEIGHT_FILES = (".safetensors", ".safetensors.index.json", ".bin", ".pt")


def as_target(pattern):
    if pattern.startswith("re:"):
        return pattern
    return "re:(?:.*\\.)?%s$" % pattern.lstrip("^").rstrip("$")


def load_tensors(source):
    from safetensors.torch import load_file
    tensors = {}
    for name in sorted(os.listdir(source)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(source, name)))
    if not tensors:
        sys.exit("%s holds no *.safetensors" % source)
    return tensors


def build_model(config_dict, tensors):
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel

    class DraftTensors(PreTrainedModel):
        config_class = PretrainedConfig
        base_model_prefix = ""
        _no_split_modules = []

        def __init__(self, config):
            super().__init__(config)
            for name, tensor in tensors.items():
                path, leaf = name.rsplit(".", 1)
                parent = self
                parts = path.split(".")
                linear = leaf == "weight" and tensor.dim() == 2 and tensor.is_floating_point()
                for depth, part in enumerate(parts):
                    last = depth == len(parts) - 1
                    child = parent._modules.get(part)
                    if child is None:
                        if last and linear:
                            child = nn.Linear(tensor.shape[1], tensor.shape[0], bias=False,
                                              dtype=tensor.dtype, device="meta")
                        else:
                            child = nn.Module()
                        parent.add_module(part, child)
                    parent = child
                if linear:
                    parent.weight = nn.Parameter(tensor, requires_grad=False)
                else:
                    parent.register_parameter(leaf, nn.Parameter(tensor, requires_grad=False))

        def forward(self, *args, **kwargs):  # pragma: no cover - never run (data-free)
            raise NotImplementedError

    # No _name_or_path: llm-compressor would look a recipe up on the Hub by it.
    config = PretrainedConfig(**{k: v for k, v in config_dict.items()
                                 if k not in ("quantization_config", "_name_or_path")})
    with torch.no_grad():
        return DraftTensors(config)


def _exit_on_sigterm(signum, frame):
    # SIGTERM (the role stopping an interrupted run's orphan) unwinds through
    # the finally below, which removes the half-written work directory.
    sys.exit(128 + signum)


def main():
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="unquantized (BF16) DFlash draft directory")
    parser.add_argument("--output", required=True, help="directory to write (replaced)")
    parser.add_argument("--targets", nargs="+", default=RECIPE_TARGETS)
    parser.add_argument("--ignore", nargs="*", default=RECIPE_IGNORE)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--source-repo", default=None, help="written as the model card's base_model")
    args = parser.parse_args()

    with open(os.path.join(args.source, "config.json")) as handle:
        source_config = json.load(handle)
    if source_config.get("quantization_config"):
        sys.exit("%s is already quantized (%s): start from the unquantized DFlash draft"
                 % (args.source, source_config["quantization_config"].get("quant_method")))

    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    tensors = load_tensors(args.source)
    model = build_model(source_config, tensors)
    targets = [as_target(t) for t in args.targets]
    scheme = QuantizationScheme(
        targets=targets,
        weights=QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group",
                                 group_size=args.group_size, dynamic=False),
    )
    recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=list(args.ignore))
    oneshot(model=model, recipe=recipe, pipeline="datafree")

    parent = os.path.dirname(os.path.abspath(args.output)) or "."
    prefix = ".draft-quant-%s-" % os.path.basename(os.path.normpath(args.output))
    # The role stops any other quantization of this output first, so a work
    # directory left here is a SIGKILLed run's.
    for name in os.listdir(parent):
        if name.startswith(prefix):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    work = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        saved = os.path.join(work, "saved")
        model.save_pretrained(saved, save_compressed=True)
        with open(os.path.join(saved, "config.json")) as handle:
            quant = json.load(handle)["quantization_config"]
        out = os.path.join(work, "out")
        os.makedirs(out)
        for name in os.listdir(saved):
            if name.endswith(WEIGHT_FILES):
                shutil.move(os.path.join(saved, name), os.path.join(out, name))
        for name in os.listdir(args.source):
            full = os.path.join(args.source, name)
            if os.path.isfile(full) and not name.endswith(WEIGHT_FILES) \
                    and name not in ("config.json", "README.md") and not name.startswith("."):
                shutil.copy2(full, os.path.join(out, name))
        config = dict(source_config, quantization_config=quant)
        with open(os.path.join(out, "config.json"), "w") as handle:
            json.dump(config, handle, indent=2)
            handle.write("\n")
        base = args.source_repo or source_config.get("_name_or_path") or os.path.basename(os.path.normpath(args.source))
        with open(os.path.join(out, "README.md"), "w") as handle:
            handle.write("---\nbase_model: %s\ntags:\n- dflash\n- speculative-decoding\n- w4a16\n---\n\n"
                         "W4A16 (int4, group %d, symmetric, pack-quantized) quantization of %s, made with "
                         "llm-compressor by laguna.spark's draft_quant role. qkv_proj and g_proj stay BF16.\n"
                         % (base, args.group_size, base))
        for name in os.listdir(out):
            os.chmod(os.path.join(out, name), 0o644)
        os.chmod(out, 0o755)
        if os.path.exists(args.output):
            shutil.move(args.output, os.path.join(work, "old"))
        shutil.move(out, args.output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"output": args.output, "ignore": quant.get("ignore"),
                      "targets": targets, "group_size": args.group_size}))


if __name__ == "__main__":
    main()
