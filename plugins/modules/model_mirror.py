#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_mirror
short_description: Copy checkpoint files to another node over several parallel rsync/ssh streams
version_added: "0.2.0"
description:
  - Runs on the node that has the good copy. Spreads O(files) over
    O(streams) rsync processes (largest files first onto the least loaded
    stream), each over its own ssh connection with O(rsh), so that the copy
    uses several cores instead of one.
  - Each stream writes into C(.cache/laguna-rsync-tmp) under O(dest)
    and renames a file into place only when it is whole; an interrupted file
    is kept in C(.cache/laguna-rsync-partial) and resumed by the next run. No
    half-written file is ever under its final name.
  - The streams die with the module. Streams that an interrupted run left
    behind (an async mirror outlives a Ctrl-C'd playbook) are not this
    module's to find; stop them before verifying the destination, with
    M(laguna.spark.stray_processes), as the staging role does.
  - Writes progress (bytes done, total, rate) as JSON to O(progress_file)
    every few seconds, for M(laguna.spark.transfer_progress).
attributes:
  check_mode:
    support: full
    description: Runs rsync with C(--dry-run).
  platform:
    support: full
    platforms: posix
    description: Linux nodes with rsync and ssh (DGX Spark, Ubuntu 24.04).
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
options:
  src:
    description: Local directory holding the good copy.
    type: path
    required: true
  dest:
    description: Destination as rsync names it, V(user@host:/path); the directory must exist with C(.cache/laguna-rsync-tmp) in it.
    type: str
    required: true
  files:
    description: Relative path to size in bytes of every file to copy.
    type: dict
    required: true
  streams:
    description: Parallel rsync/ssh streams (at most one per file).
    type: int
    default: 8
  rsync_options:
    description: rsync options of every stream.
    type: list
    elements: str
    default: [--archive]
  rsh:
    description: The remote shell command line of every stream (ssh with its cipher and options).
    type: str
    required: true
  rsync:
    description: The rsync executable.
    type: str
    default: rsync
  progress_file:
    description: JSON file to write progress to.
    type: path
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Mirror the shards the worker lacks, eight streams
  laguna.spark.model_mirror:
    src: /home/spark/models/hf/Laguna-S-2.1-FP8
    dest: spark@192.168.100.2:/home/spark/models/hf/Laguna-S-2.1-FP8
    files: {model-00003-of-00024.safetensors: 5031223296}
    streams: 8
    rsh: ssh -c aes128-gcm@openssh.com -o Compression=no
  delegate_to: spark-head
"""

RETURN = r"""
transfers:
  description: rsync's itemized list (C(%i %n)) of what went over the link, all streams.
  returned: always
  type: list
  elements: str
bytes:
  description: Bytes of the files mirrored, the sum of the sizes in O(files).
  returned: always
  type: int
seconds:
  description: Wall time of the mirror.
  returned: always
  type: float
  sample: 85.3
gb_per_s:
  description: V(bytes) / V(seconds) / 1e9.
  returned: always
  type: float
streams:
  description: Per stream, V(files), V(bytes), V(rc).
  returned: always
  type: list
  elements: dict
summary:
  description: One line with GB, seconds, GB/s and streams.
  returned: always
  type: str
  sample: mirrored 61.20 GB in 85.3 s, 0.717 GB/s, 8 stream(s)
"""

from ansible_collections.laguna.spark.plugins.module_utils import mirror
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        src=dict(type="path", required=True),
        dest=dict(type="str", required=True),
        files=dict(type="dict", required=True),
        streams=dict(type="int", default=8),
        rsync_options=dict(type="list", elements="str", default=["--archive"]),
        rsh=dict(type="str", required=True),
        rsync=dict(type="str", default="rsync"),
        progress_file=dict(type="path"),
    ))
    p = module.params
    if p["streams"] < 1 or p["streams"] > 256:
        module.fail_json(msg="streams must be 1..256")
    files = {str(k): int(v) for k, v in p["files"].items()}
    dest = p["dest"].rstrip("/") + "/"
    options = list(p["rsync_options"]) + (["--dry-run"] if module.check_mode else [])
    argv = mirror.rsync_argv(p["rsync"], options, p["rsh"], p["src"], dest)
    streams = [mirror.Stream(i, argv, part, sum(files[f] for f in part))
               for i, part in enumerate(mirror.plan(files, p["streams"]))]
    total = sum(files.values())
    seconds = mirror.run(streams, total, p["progress_file"]) if streams else 0.0
    transfers = [line for s in streams for line in s.itemized]
    result = dict(
        changed=any(line[1] == "f" and line[0] in "<>" for line in transfers),
        transfers=transfers, bytes=total, seconds=round(seconds, 3),
        gb_per_s=round(total / seconds / 1e9, 3) if seconds else 0.0,
        streams=[{"files": len(s.files), "bytes": s.total, "rc": s.rc} for s in streams],
        summary="mirrored %.2f GB in %.1f s, %.3f GB/s, %d stream(s)%s" % (
            total / 1e9, seconds, total / seconds / 1e9 if seconds else 0.0, len(streams),
            " (dry run)" if module.check_mode else ""))
    failed = [s for s in streams if s.rc != 0]
    if failed:
        module.fail_json(msg="%d of %d rsync stream(s) failed: %s" % (
            len(failed), len(streams),
            "; ".join("rc %s: %s" % (s.rc, (s.err.decode(errors="replace").strip() or " ".join(s.other))[-400:])
                      for s in failed)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
