# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The precision a DFlash draft was built for, and its target's config.

What is inferred rather than read from vLLM: the target precision a draft was
built for is not a config key vLLM knows. It is taken from, in order, an
explicit value, ``speculators_config.verifier.name_or_path`` (the speculators
format's verifier), the model card's ``base_model`` front matter, the config's
``_name_or_path``, the repo id the draft was downloaded from, and the draft
directory's name, by the precision token they carry (FP8, NVFP4, INT4, MXFP4,
BF16), e.g. ``poolside/Laguna-S-2.1-DFlash-NVFP4``.
"""

from __future__ import annotations

import os
import re

from ansible_collections.laguna.spark.plugins.module_utils.dflash_layout import model_card_base_models, read_config

FAMILIES = ("NVFP4", "MXFP4", "FP8", "INT4", "INT8", "BF16")
_FAMILY_TOKEN = re.compile(r"(?i)(?:^|[-_/.\s])(NVFP4|MXFP4|FP8|INT4|INT8|BF16)(?=$|[-_/.\s])")


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


def target_info(target_path):
    config = read_config(target_path, "target")
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
