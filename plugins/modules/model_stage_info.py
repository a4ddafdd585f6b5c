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
  - Read-only; supports check mode.
options:
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
  description: Why it is not complete.
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
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import model_stage


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            shard_pattern=dict(type="str", default="*.safetensors"),
            expected_shards=dict(type="int"),
            exclude=dict(type="list", elements="str", default=[".cache"]),
            reference=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    scanned = model_stage.scan(params["path"], params["shard_pattern"], tuple(params["exclude"]))
    reference = None
    if params["reference"] is not None:
        reference = {str(k): int(v) for k, v in params["reference"].items()}
    complete, problems = model_stage.verdict(scanned, params["expected_shards"], reference)
    module.exit_json(
        changed=False, complete=complete, problems=problems,
        shard_count=len(scanned["shards"]), shards=scanned["shards"],
        incomplete=scanned["incomplete"], manifest=scanned["manifest"],
        total_bytes=scanned["total_bytes"], exists=scanned["exists"],
    )


if __name__ == "__main__":
    main()
