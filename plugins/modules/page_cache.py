#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: page_cache
short_description: Drop the page cache of every file in some directory trees
version_added: "0.2.0"
description:
  - Measures how much of each tree in O(paths) is resident in the page cache
    (C(mincore(2)) over a mapping of each file; nothing is read), and with
    O(state=dropped) asks the kernel to drop those pages
    (C(posix_fadvise(POSIX_FADV_DONTNEED)) on each file), as the recipe's
    purge-cache step does before serving, so that the unified memory of a
    GB10 is free for the model when vLLM loads it.
  - Needs no root; other files' cached pages are left alone.
  - Changed when any cached page was found (and, outside check mode, dropped).
attributes:
  check_mode:
    support: full
    description: Reports how much is cached and would be dropped; drops nothing.
  platform:
    support: full
    platforms: linux
    description: Linux (C(mincore(2)) and C(posix_fadvise(2))).
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
options:
  paths:
    description: Directory trees (missing ones are reported as such and skipped).
    type: list
    elements: path
    required: true
  state:
    description: V(dropped) drops the cached pages; V(present) only reports.
    type: str
    choices: [dropped, present]
    default: dropped
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Free the page cache of the model trees before serving
  laguna.spark.page_cache:
    paths:
      - /home/spark/models/hf/Laguna-S-2.1-FP8
      - /home/spark/models/hf/Laguna-S-2.1-DFlash-W4A16
  register: purge

- name: How much is cached (changes nothing)
  laguna.spark.page_cache:
    paths: [/home/spark/models/hf]
    state: present
"""

RETURN = r"""
trees:
  description: Per tree, V(files), V(bytes), V(cached) (before), V(cached_after) and V(exists).
  returned: always
  type: dict
cached_bytes:
  description: Bytes of the trees in the page cache before.
  returned: always
  type: int
cached_after:
  description: Bytes still cached afterwards (equal to RV(cached_bytes) in check mode or with O(state=present)).
  returned: always
  type: int
msg:
  description: "One line, e.g. C(dropped 56.61 GB of page cache over 2 tree(s), 0.00 GB left)."
  returned: always
  type: str
"""

from ansible_collections.laguna.spark.plugins.module_utils import page_cache
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        paths=dict(type="list", elements="path", required=True),
        state=dict(type="str", choices=["dropped", "present"], default="dropped"),
    ))
    paths = module.params["paths"]
    try:
        before = page_cache.survey(paths)
        cached = sum(t["cached"] for t in before.values())
        act = module.params["state"] == "dropped" and cached > 0 and not module.check_mode
        if act:
            page_cache.drop_trees(paths)
            after = page_cache.survey(paths)
        else:
            after = before
    except OSError as exc:
        module.fail_json(msg="page cache of %s: %s" % (", ".join(paths), exc))
    for root, entry in before.items():
        entry["cached_after"] = after[root]["cached"]
    cached_after = sum(t["cached"] for t in after.values())
    if module.params["state"] == "present":
        msg = "%.2f GB of page cache over %d tree(s)" % (cached / 1e9, len(paths))
    elif module.check_mode:
        msg = "would drop %.2f GB of page cache over %d tree(s)" % (cached / 1e9, len(paths))
    else:
        msg = "dropped %.2f GB of page cache over %d tree(s), %.2f GB left" % (
            (cached - cached_after) / 1e9, len(paths), cached_after / 1e9)
    module.exit_json(changed=module.params["state"] == "dropped" and cached > 0,
                     trees=before, cached_bytes=cached, cached_after=cached_after, msg=msg)


if __name__ == "__main__":
    main()
