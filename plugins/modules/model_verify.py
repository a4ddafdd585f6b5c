#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_verify
short_description: Verify a model checkpoint by checksum, and repair what fails
version_added: "0.2.0"
description:
  - Checks every file of O(expected) in O(path) by size, then by sha256 (LFS
    files) or git blob id (regular files), as the Hugging Face Hub publishes
    them (see M(laguna.spark.hf_repo_manifest)) or as another node's verified
    RV(manifest) has them.
  - Digests are kept in a per-node record (O(hash_cache)) keyed by path, size,
    mtime, ctime, inode and device, so an unchanged file is never hashed twice;
    RV(hashed) says which files were hashed and why.
  - With O(repair) files that fail are removed (with the C(hf download)
    metadata that would make C(hf) trust them), so that the next download or
    mirror fetches them again from a good copy; O(extras=remove) also removes
    files the reference does not have; O(clean_partials) removes what an
    interrupted C(hf download) or rsync left behind in C(.cache).
  - Files that O(expected) does not name are never compared. RV(shadowing)
    lists those that vLLM or transformers would read as part of the model (a
    top-level file with a shard's name, or a weights, C(.json), C(.jinja),
    C(.py) or tokenizer file), and RV(shadowing_problem) says what to do.
  - Without check mode, and with O(hash_cache), the record keeps the list of
    files O(path) was verified against (the keys of O(expected)), so that
    M(laguna.spark.model_stage_info) compares what it names.
  - O(stop_downloads) first stops C(hf download) processes writing to
    O(path) that an interrupted playbook left running.
attributes:
  check_mode:
    support: full
    description: Reports what it would remove; removes and stops nothing.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.checkpoint,
                                 laguna.spark.hub.digests]
options:
  expected:
    description:
      - Relative path to V({size, sha256}) or V({size, git_oid}), for every
        file a complete copy has.
    type: dict
    required: true
  expected_shards:
    description: How many shards O(expected) must name; unset means at least one.
    type: int
  hash_cache:
    description: JSON file recording the digests of this node's files. Unset, nothing is recorded.
    type: path
  repair:
    description: Remove files that fail verification (and, with O(extras=remove), extra files).
    type: bool
    default: false
  extras:
    description:
      - What to do with files that O(expected) does not name (outside C(.cache)).
      - C(report) counts each as a problem; C(remove) removes them (with O(repair)) and counts them;
        C(ignore) leaves them; C(warn) leaves them, names them in a warning, and counts as a problem
        those of RV(shadowing).
    type: str
    choices: [report, remove, ignore, warn]
    default: report
  clean_partials:
    description: Remove partial and stray files in C(.cache) (no download may be running).
    type: bool
    default: false
  reserve_bytes:
    description:
      - Bytes to leave free on the filesystem after the files of RV(refetch)
        arrive; RV(space_problem) says when they would not fit.
    type: int
    default: 0
  stop_downloads:
    description: Stop C(hf download --local-dir <path>) processes first (SIGTERM, then SIGKILL).
    type: bool
    default: false
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What the Hub publishes for the checkpoint (files, sizes, sha256)
  laguna.spark.hf_repo_manifest:
    repo: poolside/Laguna-S-2.1-FP8
  register: hub

- name: Verify the head's copy against it, removing what fails
  laguna.spark.model_verify:
    path: /home/spark/models/hf/Laguna-S-2.1-FP8
    expected: "{{ hub.files }}"
    expected_shards: 24
    hash_cache: /home/spark/.cache/laguna-spark/sha256.json
    repair: true
    clean_partials: true
  register: head
"""

RETURN = r"""
complete:
  description: Whether every expected file is present and verified, and nothing stray is left.
  returned: always
  type: bool
problems:
  description: Why it is not complete (missing, failed or extra files, partial files left in C(.cache)).
  returned: always
  type: list
  elements: str
missing:
  description: Expected files that are absent (or were removed as bad).
  returned: always
  type: list
  elements: str
bad:
  description: Files that failed verification, with why (V(path), V(why)).
  returned: always
  type: list
  elements: dict
extra:
  description: Files outside C(.cache) that O(expected) does not name.
  returned: always
  type: list
  elements: str
shadowing:
  description:
    - Of RV(extra), the files vLLM or transformers would read as part of the model, with why
      (V(path), V(why)).
  returned: always
  type: list
  elements: dict
shadowing_problem:
  description: Empty when RV(shadowing) is; otherwise a sentence naming each file and the fix.
  returned: always
  type: str
stray:
  description: Partial or stray files in C(.cache) (C(*.incomplete), C(*.lock), other).
  returned: always
  type: list
  elements: str
partial:
  description: Resumable rsync partial files (kept for the next mirror unless the file is good now).
  returned: always
  type: list
  elements: str
removed:
  description: Files removed (none in check mode).
  returned: always
  type: list
  elements: str
rewritten:
  description:
    - Files that differ from O(expected) but are the rewrite of exactly the
      expected file that the record in O(hash_cache) holds (a draft's
      C(config.json) whose ignore list M(laguna.spark.dflash_draft_ignore)
      made regexes). They count as verified.
  returned: always
  type: list
  elements: str
refetch:
  description: Expected files that a download or mirror has to bring (missing, or removed as bad).
  returned: always
  type: list
  elements: str
manifest:
  description: Relative path to V({size, sha256, git_oid}) of every verified file.
  returned: always
  type: dict
shard_count:
  description: Verified shards.
  returned: always
  type: int
verified:
  description: How many files were verified.
  returned: always
  type: int
total_bytes:
  description: Bytes of the verified files.
  returned: always
  type: int
expected_bytes:
  description: Bytes of all expected files.
  returned: always
  type: int
hashed:
  description: Files hashed in this run (V(path), V(bytes), V(reason)); empty when the record covered everything.
  returned: always
  type: list
  elements: dict
hashed_summary:
  description: One line saying what was hashed and why, or that nothing was.
  returned: always
  type: str
stopped:
  description: PIDs of C(hf download) processes that were stopped.
  returned: always
  type: list
  elements: int
refetch_bytes:
  description: Bytes of the files of RV(refetch).
  returned: always
  type: int
free_bytes:
  description: Bytes still free for the service user on the filesystem of O(path) (after any removal).
  returned: always
  type: int
space_problem:
  description:
    - Empty when the files of RV(refetch) fit into RV(free_bytes) with O(reserve_bytes) to spare;
      otherwise a message naming the shortfall and the fix.
  returned: always
  type: str
exists:
  description: Whether O(path) is a directory.
  returned: always
  type: bool
now:
  description: The node's clock when the module finished, in seconds since the epoch.
  returned: always
  type: float
"""

import time

from ansible_collections.laguna.spark.plugins.module_utils import hashcache, model_stage, procs
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        model_stage.checkpoint_options(),
        expected=dict(type="dict", required=True),
        expected_shards=dict(type="int"),
        hash_cache=dict(type="path"),
        full=dict(type="bool", default=False),
        repair=dict(type="bool", default=False),
        extras=dict(type="str", choices=["report", "remove", "ignore", "warn"], default="report"),
        clean_partials=dict(type="bool", default=False),
        stop_downloads=dict(type="bool", default=False),
        reserve_bytes=dict(type="int", default=0),
    ))
    p = module.params
    stopped = []
    if p["stop_downloads"]:
        stopped = model_stage.download_processes(p["path"])
        if stopped and not module.check_mode:
            procs.terminate(stopped, 5.0)
    try:
        expected = model_stage.normalized_expected(p["expected"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    cache = hashcache.HashCache.load(p["hash_cache"], ignore=p["full"])
    try:
        result = model_stage.verify_checkpoint(
            p["path"], expected, cache, p["shard_pattern"], p["expected_shards"], extras=p["extras"],
            repair=p["repair"], clean_partials=p["clean_partials"], check_mode=module.check_mode,
            reserve_bytes=p["reserve_bytes"], record_list=bool(p["hash_cache"]))
    except OSError as exc:
        module.fail_json(msg="cannot verify %s: %s" % (p["path"], exc))
    if p["hash_cache"] and cache.dirty and not module.check_mode:
        cache.save(p["hash_cache"], module)
    if p["extras"] == "warn" and result["extra"]:
        module.warn(model_stage.extras_warning(p["path"], result["extra"]))
    module.exit_json(changed=bool(result["removed"] or (stopped and not module.check_mode)),
                     stopped=stopped, now=time.time(), **result)


if __name__ == "__main__":
    main()
