#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_draft_ignore
short_description: Rewrite a quantized DFlash draft's ignore list into regexes vLLM 0.25.1 matches
version_added: "0.1.0"
description:
  - vLLM matches C(quantization_config.ignore) against the B(prefixed) module
    names it builds (C(model.layers.0.self_attn.g_proj)). Literal names as
    quantization tools write them (C(layers.0.self_attn.g_proj)) match
    nothing, so the layer is built quantized and loading fails with a
    KeyError on its C(.weight).
  - Rewrites every ignore entry that matches no module vLLM builds for the
    draft, but does name a module of the checkpoint, into an anchored C(re:)
    regex. Literals that cover one projection in every layer collapse into
    the recipe's form C(re:.*\.self_attn\.g_proj$); others become
    C(re:(?:.*\.)?<escaped name>$). A C(re:) entry that matches only the
    unprefixed name gets an optional prefix group.
  - Entries that already match are kept; entries that match nothing either
    way are kept and returned in RV(unmatched).
  - Only compressed-tensors drafts are changed. Idempotent; supports check
    mode and diff mode; can keep a backup of C(config.json).
attributes:
  check_mode:
    support: full
    description: Reports the rewrite it would make and writes nothing.
  diff_mode:
    support: full
    description: Shows the ignore list before and after the rewrite.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host holding the draft checkpoint.
options:
  path:
    description: The draft checkpoint directory (its C(config.json) is rewritten).
    type: path
    required: true
  backup:
    description: Keep a timestamped copy of C(config.json) before changing it.
    type: bool
    default: true
  hash_cache:
    description:
      - The node's checksum record that M(laguna.spark.model_verify) keeps.
        When given, the rewrite is recorded there (the digests of the file
        before, the sha256 after), so that verifying the draft against the
        Hub afterwards accepts this rewrite of the published file, and
        hashes nothing again.
    type: path
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Make the draft's ignore list match vLLM's module names
  laguna.spark.dflash_draft_ignore:
    path: /home/spark/models/Laguna-S-2.1-DFlash-W4A16

- name: Rewrite a staged draft and record it, so staging still verifies it against the Hub
  laguna.spark.dflash_draft_ignore:
    path: /home/spark/models/Laguna-S-2.1-DFlash-W4A16
    backup: false
    hash_cache: /home/spark/.cache/laguna-spark/sha256.json

- name: What would change?
  laguna.spark.dflash_draft_ignore:
    path: /home/spark/models/Laguna-S-2.1-DFlash-W4A16
  check_mode: true
  diff: true
"""

RETURN = r"""
path:
  description: The C(config.json) examined.
  returned: success
  type: str
ignore:
  description: The ignore list after the run (or as it would be, in check mode).
  returned: success
  type: list
  elements: str
changes:
  description: Old entry to new entry, for every entry rewritten.
  returned: success
  type: dict
unmatched:
  description: Entries that match neither a vLLM module nor a checkpoint module (kept as they are).
  returned: success
  type: list
  elements: str
backup_file:
  description: Copy of the original C(config.json).
  returned: when a backup was made
  type: str
recorded:
  description: Whether the rewrite was recorded in O(hash_cache).
  returned: success
  type: bool
"""

import json
import os

from ansible.module_utils.common.text.converters import to_bytes
from ansible_collections.laguna.spark.plugins.module_utils import dflash_quant, files, hashcache
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        path=dict(type="path", required=True),
        backup=dict(type="bool", default=True),
        hash_cache=dict(type="path"),
    ))
    path = os.path.join(module.params["path"], "config.json")
    if not os.path.isfile(path):
        module.fail_json(msg="%s does not exist: is the draft staged in %s?" % (path, module.params["path"]))
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        config = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        module.fail_json(msg="%s is not JSON: %s" % (path, exc))
    new_config, changes, unmatched = dflash_quant.fix_ignore_config(config)
    ignore = list(((new_config.get("quantization_config") or {}).get("ignore")) or [])
    result = dict(changed=bool(changes), path=path, ignore=ignore, changes=changes, unmatched=unmatched,
                  recorded=False)
    if changes:
        after = json.dumps(new_config, indent=2, ensure_ascii=False) + "\n"
        if module._diff:
            result["diff"] = dict(before=raw.decode("utf-8"), after=after,
                                  before_header=path, after_header=path + " (ignore as regexes)")
        if not module.check_mode:
            if module.params["backup"]:
                result["backup_file"] = module.backup_local(path)
            files.write_atomic(module, path, to_bytes(after))
            if module.params["hash_cache"]:
                cache = hashcache.HashCache.load(module.params["hash_cache"])
                new_digests = hashcache.digest_bytes(to_bytes(after))
                cache.record_rewrite(path, hashcache.digest_bytes(raw), new_digests[0])
                cache.record(path, *new_digests)
                cache.save(module.params["hash_cache"], module)
                result["recorded"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
