# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What of a model checkpoint is on disk: shards, partial downloads, sizes."""

from __future__ import annotations

import fnmatch
import os


def scan(path, shard_pattern="*.safetensors", exclude=(".cache",)):
    """Walk ``path`` and describe it.

    ``manifest`` maps each file (relative path) to its size, leaving out
    directories named in ``exclude`` (hf's ``.cache`` metadata); ``incomplete``
    lists every ``*.incomplete`` file anywhere below ``path``, ``.cache``
    included, because that is where `hf download` keeps its partial files.
    """
    result = {"exists": os.path.isdir(path), "manifest": {}, "shards": [],
              "incomplete": [], "total_bytes": 0}
    if not result["exists"]:
        return result
    for root, dirs, files in os.walk(path):
        rel_root = os.path.relpath(root, path)
        skipped = rel_root != "." and rel_root.split(os.sep)[0] in exclude
        dirs.sort()
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if name.endswith(".incomplete"):
                result["incomplete"].append(rel)
                continue
            if skipped:
                continue
            try:
                size = os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
            result["manifest"][rel] = size
            result["total_bytes"] += size
            if rel_root == "." and fnmatch.fnmatch(name, shard_pattern):
                result["shards"].append(rel)
    return result


def verdict(scanned, expected_shards=None, reference=None):
    """Whether a scan is a complete copy, and why not.

    ``expected_shards`` None means "at least one"; ``reference`` is another
    scan's manifest that this one must equal file for file and byte for byte.
    """
    problems = []
    found = len(scanned["shards"])
    if not scanned["exists"]:
        problems.append("directory is missing")
    elif expected_shards is None and found == 0:
        problems.append("no shards found")
    elif expected_shards is not None and found != expected_shards:
        problems.append("%d of %d shards" % (found, expected_shards))
    if scanned["incomplete"]:
        problems.append("%d *.incomplete file(s): %s" % (
            len(scanned["incomplete"]), ", ".join(scanned["incomplete"][:5])))
    if reference is not None and scanned["exists"]:
        mine = scanned["manifest"]
        missing = sorted(set(reference) - set(mine))
        differ = sorted(f for f in reference if f in mine and mine[f] != reference[f])
        if missing:
            problems.append("%d file(s) missing vs. reference: %s" % (len(missing), ", ".join(missing[:5])))
        if differ:
            problems.append("%d file(s) differ in size vs. reference: %s" % (len(differ), ", ".join(differ[:5])))
    return not problems, problems
