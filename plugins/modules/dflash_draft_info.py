#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_draft_info
short_description: Check a Laguna DFlash draft the way vLLM 0.25.1 will load it, before starting vLLM
version_added: "0.1.0"
description:
  - Reads the staged draft's C(config.json), C(model.safetensors.index.json)
    and safetensors headers (no torch, no weights read) and reports its
    architecture and method, the target precision it was built for and whether
    it pairs with the staged target (hidden size, vocabulary, shared lm_head,
    precision family), its quantization scheme, and for every linear layer
    whether vLLM 0.25.1 builds it quantized.
  - "The per-layer answer re-implements vLLM 0.25.1's compressed-tensors rules
    (C(should_ignore_layer), C(find_matched_target)). An C(ignore) or
    C(targets) entry matches the B(prefixed) module name
    (C(model.layers.0.self_attn.qkv_proj)) exactly, or with C(re:) by a regex
    match anchored at the start; targets also match a substring of the class
    name (C(Linear)). The draft has no fused-shard mapping."
  - Fails (unless O(fail_on_problems=false)) when qkv_proj or g_proj would be
    quantized, when a layer's tensors do not fit how vLLM builds it (the
    KeyError / AttributeError of a failed start), when vLLM would refuse the
    config, or when the draft was built for another target precision than the
    target's (0% acceptance).
  - The precision a draft was built for is not a vLLM config key. It is
    inferred from O(draft_target_family), else the first precision token
    (FP8, NVFP4, MXFP4, INT4, INT8, BF16) in
    C(speculators_config.verifier.name_or_path), the model card's
    C(base_model), C(_name_or_path), O(draft_repo), or the directory name.
    The target's comes from its C(quantization_config).
  - Missing draft config keys take vLLM's C(LagunaConfig) defaults.
  - Read-only.
attributes:
  check_mode:
    support: full
    description: Only reads files; the same result in check mode.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host holding the draft and target checkpoints.
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
options:
  path:
    description: The draft checkpoint directory.
    type: path
    required: true
  target_path:
    description: The target checkpoint directory; without it the pairing is not checked.
    type: path
  draft_repo:
    description: Repo id the draft came from (a name that may carry its target precision).
    type: str
  draft_target_family:
    description: Target precision the draft was built for, when no name tells it.
    type: str
    choices: [NVFP4, MXFP4, FP8, INT4, INT8, BF16]
  fail_on_problems:
    description: Fail when RV(problems) is not empty. With V(false) the report is returned with RV(ok=false).
    type: bool
    default: true
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the draft against the target before starting vLLM
  laguna.spark.dflash_draft_info:
    path: /home/spark/models/Laguna-S-2.1-DFlash-W4A16
    target_path: /home/spark/models/Laguna-S-2.1-FP8
    draft_repo: sapidlabs/Sparkulator-Laguna-S-2.1
  register: draft

- name: Report only
  laguna.spark.dflash_draft_info:
    path: /home/spark/models/Laguna-S-2.1-DFlash-W4A16
    fail_on_problems: false
  register: draft_report

- name: Say what is wrong and which draft to stage
  ansible.builtin.debug:
    msg: "{{ draft_report.problems + [draft_report.pairing_hint] }}"
  when: not draft_report.ok
"""

RETURN = r"""
ok:
  description: No problems found.
  returned: always
  type: bool
problems:
  description: What stops the draft from loading or pairing, each with what to change.
  returned: always
  type: list
  elements: str
warnings_list:
  description: Things worth knowing that do not stop the draft (unknown built-for precision, dead ignore entries).
  returned: success
  type: list
  elements: str
summary:
  description: One line about the draft.
  returned: success
  type: str
pairing_hint:
  description:
    - Sentences on the draft's pairing with the target (what it was built
      for, what it is served with, what to do), for a spec-decode acceptance
      of 0.
  returned: always
  type: str
exists:
  description: Whether O(path) holds a C(config.json).
  returned: always
  type: bool
architecture:
  description: C(architectures[0]) of the draft's config.
  returned: success
  type: str
vllm_architecture:
  description: The class vLLM builds (C(DFlash) prefixed as vLLM's EAGLEConfig does).
  returned: success
  type: str
method:
  description: C(dflash) when it is a DFlash draft, else null.
  returned: success
  type: str
model_type:
  description: The draft config's C(model_type).
  returned: success
  type: str
num_hidden_layers:
  description: Draft layers.
  returned: success
  type: int
layer_types:
  description: Distinct layer types of the draft.
  returned: success
  type: list
  elements: str
hidden_size:
  description: Draft hidden size.
  returned: success
  type: int
draft_vocab_size:
  description: The draft's C(draft_vocab_size).
  returned: success
  type: int
target_layer_ids:
  description: C(dflash_config.target_layer_ids).
  returned: success
  type: list
  elements: int
mask_token_id:
  description: C(dflash_config.mask_token_id).
  returned: success
  type: int
built_for:
  description: Target precision the draft was built for.
  returned: success
  type: dict
  contains:
    family:
      description: FP8, NVFP4, MXFP4, INT4, INT8, BF16, or null when unknown.
      type: str
    source:
      description: Where it was read from.
      type: str
    name:
      description: The name it was read from.
      type: str
target:
  description: The target (when O(target_path) is set).
  returned: success
  type: dict
  contains:
    path:
      description: O(target_path).
      type: str
    architectures:
      description: Target architectures.
      type: list
    hidden_size:
      description: Target hidden size.
      type: int
    vocab_size:
      description: Target vocabulary.
      type: int
    num_hidden_layers:
      description: Target layers.
      type: int
    tie_word_embeddings:
      description: Whether the target ties lm_head to its embedding.
      type: bool
    quant_method:
      description: The target's quant method.
      type: str
    family:
      description: The target's precision family.
      type: str
pairing:
  description: How the draft pairs with the target (null where not checked).
  returned: success
  type: dict
  contains:
    hidden_size_match:
      description: Same hidden size.
      type: bool
    vocab_match:
      description: C(draft_vocab_size) equals the target's vocabulary.
      type: bool
    shares_lm_head:
      description: The draft has no lm_head of its own and uses the target's.
      type: bool
    family_match:
      description: Built for the target's precision family.
      type: bool
    target_layers_in_range:
      description: Every target layer id exists in the target.
      type: bool
quantization:
  description: The draft's quantization_config, summarised (null when unquantized).
  returned: success
  type: dict
  contains:
    quant_method:
      description: E.g. compressed-tensors.
      type: str
    format:
      description: E.g. pack-quantized.
      type: str
    schemes:
      description: E.g. W4A16.
      type: list
    description:
      description: Bits, group size, symmetry, format.
      type: str
    targets:
      description: All config_groups targets.
      type: list
    ignore:
      description: The ignore list.
      type: list
    unmatched_ignore:
      description: Ignore entries that match no module vLLM builds.
      type: list
layers:
  description: Every linear layer vLLM builds for the draft.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: vLLM's prefixed module name.
      type: str
    checkpoint_name:
      description: The tensor prefix in the checkpoint.
      type: str
    cls:
      description: vLLM's layer class.
      type: str
    quantized:
      description: Whether vLLM builds it quantized.
      type: bool
    scheme:
      description: E.g. W4A16, or null.
      type: str
    matched_target:
      description: The config_groups target that matched.
      type: str
    ignored_by:
      description: The ignore entries that matched.
      type: list
    ok:
      description: Its tensors fit and it may be quantized this way.
      type: bool
    problems:
      description: What is wrong with it.
      type: list
quantized_layers:
  description: Names of the layers vLLM builds quantized.
  returned: success
  type: list
  elements: str
tensor_count:
  description: Tensors in the checkpoint.
  returned: success
  type: int
"""

from ansible_collections.laguna.spark.plugins.module_utils import dflash_config, dflash_draft
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        path=dict(type="path", required=True),
        target_path=dict(type="path"),
        draft_repo=dict(type="str"),
        draft_target_family=dict(type="str", choices=list(dflash_config.FAMILIES)),
        fail_on_problems=dict(type="bool", default=True),
    ))
    params = module.params
    report = dflash_draft.report(params["path"], params["target_path"], params["draft_repo"],
                                 params["draft_target_family"])
    error = report.pop("error", None)
    if error is not None:
        if params["fail_on_problems"]:
            module.fail_json(msg=error, changed=False, **report)
        module.exit_json(changed=False, **report)
    if report["problems"] and params["fail_on_problems"]:
        module.fail_json(msg="The DFlash draft in %s will not work: %s" % (params["path"], " | ".join(report["problems"])),
                         changed=False, **report)
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
