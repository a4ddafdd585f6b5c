#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage_info
short_description: Tell whether a model checkpoint directory is completely staged
version_added: "0.1.0"
description:
  - Counts the shards of a checkpoint directory, lists C(*.incomplete) files
    (partial C(hf download) or rsync transfers) and returns a manifest of
    every file with its size.
  - With O(reference) (another node's RV(manifest)) the copy must also match
    it file for file and byte for byte, which catches a truncated
    C(--inplace) transfer that left the right file names behind.
  - With O(hash_cache), a node's checksum record that holds the file list
    the directory was last verified against (M(laguna.spark.model_verify)
    records it), only the files that list names are counted and compared;
    the others are returned as RV(extra) and are a problem only when vLLM or
    transformers would read them as part of the model (RV(shadowing)).
  - Read-only; supports check mode.
options:
  hash_cache:
    description: The node's checksum record (see M(laguna.spark.model_verify)). Unset, or without a list for O(path), every file counts.
    type: path
  expected_shards:
    description: How many shards a complete checkpoint has; unset means at least one.
    type: int
  exclude:
    description: Top-level directories left out of the manifest (hf metadata).
    type: list
    elements: str
    default: [".cache"]
  reference:
    description: Manifest (relative path to size) this directory must match.
    type: dict
attributes:
  check_mode:
    support: full
    description: Only reads the directory; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.checkpoint]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Is the FP8 checkpoint complete here?
  laguna.spark.model_stage_info:
    path: /data/models/Laguna-S-2.1-FP8
    expected_shards: 24
  register: stage

- name: Does the worker's copy match the head's?
  laguna.spark.model_stage_info:
    path: /data/models/Laguna-S-2.1-FP8
    expected_shards: 24
    reference: "{{ hostvars[groups.spark_head[0]].stage.manifest }}"
"""

RETURN = r"""
complete:
  description: Whether the directory is a complete copy.
  returned: always
  type: bool
problems:
  description: Why it is not complete (missing or partial files, a shard count or sizes that differ from O(reference)).
  returned: always
  type: list
  elements: str
shard_count:
  description: Shards found.
  returned: always
  type: int
incomplete:
  description: C(*.incomplete) files found, relative to O(path).
  returned: always
  type: list
  elements: str
manifest:
  description: Relative path to size in bytes, for every file outside O(exclude).
  returned: always
  type: dict
total_bytes:
  description: Sum of the manifest's sizes.
  returned: always
  type: int
exists:
  description: Whether O(path) is a directory.
  returned: always
  type: bool
named:
  description: Whether a recorded file list was found for O(path) (and RV(manifest) holds only what it names).
  returned: always
  type: bool
extra:
  description: With a recorded file list, the files outside O(exclude) that it does not name.
  returned: always
  type: list
  elements: str
missing:
  description: With a recorded file list, the files it names that are absent.
  returned: always
  type: list
  elements: str
shadowing:
  description: Of RV(extra), the files vLLM or transformers would read as part of the model (V(path), V(why)).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.laguna.spark.plugins.module_utils import hashcache, model_stage
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        model_stage.checkpoint_options(),
        expected_shards=dict(type="int"),
        exclude=dict(type="list", elements="str", default=[".cache"]),
        reference=dict(type="dict"),
        hash_cache=dict(type="path"),
    ))
    params = module.params
    names = hashcache.HashCache.load(params["hash_cache"]).list_of(params["path"]) if params["hash_cache"] else None
    module.exit_json(changed=False, **model_stage.stage_info(
        params["path"], params["shard_pattern"], params["expected_shards"], tuple(params["exclude"]),
        params["reference"], names))


if __name__ == "__main__":
    main()
