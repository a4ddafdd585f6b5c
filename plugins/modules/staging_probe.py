#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: staging_probe
short_description: Read in one call everything the staging role checks on a node
version_added: "0.2.0"
description:
  - The staging role's probe. On the head (O(is_head)), for each of
    O(artifacts), asks the Hub which commit its revision is on and the files
    it publishes there (as M(laguna.spark.hf_repo_manifest) asks, from this
    node, with E(HF_ENDPOINT) and E(HF_TOKEN)), verifies the copy against them
    (as M(laguna.spark.model_verify) does, through the digest record
    O(hash_cache) - a file is not hashed again only when its size, mtime,
    ctime, inode and device are those it had when hashed), looks for an
    C(hf download) an interrupted run left writing it, for partial or stray
    files in its C(.cache), whether the record lists the Hub's files as the
    tree's file list, and, with the artifact's C(fix_ignore), which ignore
    entries M(laguna.spark.dflash_draft_ignore) would rewrite; then lists the
    rsync streams of any mirror an interrupted run left sending.
  - On a worker, for each of O(artifacts), verifies the copy against the
    head's verified copy (O(head_artifacts), the head's read), and looks for
    the receivers of an interrupted mirror writing it, for O(head_senders)
    sending to it, for files the head's copy does not have, and for partial
    or stray files.
  - On every node, reads each checkpoint as M(laguna.spark.model_stage_info)
    does and judges it as M(laguna.spark.status_report) does (RV(report)).
  - Returns one line per difference (RV(differences)) and, per checkpoint,
    whether the role's download, mirror or repair tasks have anything to do
    on it (C(act)), so that they run on exactly that.
  - Changes nothing on the node but the digest record, where the digests it
    computed are kept (not in check mode), as M(laguna.spark.model_verify)
    keeps them.
attributes:
  check_mode:
    support: full
    description: The same reads in check mode; the digests computed are not recorded.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.hub,
                                 laguna.spark.hub.digests]
options:
  artifacts:
    description:
      - The checkpoints, as the role's C(staging_artifacts) has them (C(name),
        C(path), C(repo), C(revision), C(expected_shards), C(fix_ignore)).
      - On a worker each also has C(mirror_dest), the C(user@address:path) the head's mirror sends to.
    type: list
    elements: dict
    required: true
  is_head:
    description: Whether this node is the head (it asks the Hub and verifies against it).
    type: bool
    default: true
  head_artifacts:
    description: On a worker, the head's read of each checkpoint (this module's RV(artifacts) on the head), in the same order.
    type: list
    elements: dict
    default: []
  head_senders:
    description: On a worker, the mirror senders the head's read found (RV(senders) on the head).
    type: list
    elements: dict
    default: []
  head_host:
    description: The head's inventory name, for the messages.
    type: str
    default: the head
  mirror_login:
    description:
      - On a worker, the C(user@address) the head's mirror sends to; an artifact's C(mirror_dest) is
        C(<mirror_login>:<path>) unless it has one.
    type: str
  use_source_path:
    description:
      - Read each artifact's C(source_path) (else its C(path)), the head's copy as a worker names it
        (when the head's read is made for workers that run without the head).
    type: bool
    default: false
  shard_pattern:
    description: Glob that names a shard in a checkpoint's top directory.
    type: str
    default: "*.safetensors"
  hash_cache:
    description: The node's digest record, the one M(laguna.spark.model_verify) keeps.
    type: path
    required: true
  reserve_bytes:
    description: Bytes to leave free after what is to fetch arrives (each checkpoint's C(verify.space_problem)).
    type: int
    default: 0
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the head's checkpoints
  laguna.spark.staging_probe:
    artifacts: "{{ staging_artifacts }}"
    hash_cache: /home/spark/.cache/laguna-spark/sha256.json
  register: head_read

- name: Probe a worker's checkpoints against the head's
  laguna.spark.staging_probe:
    artifacts:
      - name: target
        path: /home/spark/models/hf/Laguna-S-2.1-FP8
        expected_shards: 24
        mirror_dest: spark@10.0.0.2:/home/spark/models/hf/Laguna-S-2.1-FP8
    is_head: false
    head_artifacts: "{{ hostvars['spark-head'].head_read.artifacts }}"
    head_senders: "{{ hostvars['spark-head'].head_read.senders }}"
    hash_cache: /home/spark/.cache/laguna-spark/sha256.json
"""

RETURN = r"""
differences:
  description: One line per thing the role would change, naming the checkpoint; empty when nothing.
  returned: always
  type: list
  elements: str
artifacts:
  description:
    - Per checkpoint, in the order of O(artifacts) - C(name), C(path); C(verify), the result
      M(laguna.spark.model_verify) returns read-only (null on a worker whose head stages the checkpoint in
      this run); C(scan), M(laguna.spark.model_stage_info)'s result with C(item); C(list_recorded);
      C(differences); C(act), whether anything is to be done on it.
    - On the head also C(repo), C(revision), C(commit), C(downloads) (PIDs of C(hf download) processes
      writing it), C(ignore_changes) and C(extras_warning).
    - On a worker also C(senders) and C(receivers), the processes of an interrupted mirror to it.
  returned: always
  type: list
  elements: dict
hubs:
  description: On the head, per checkpoint, what the Hub publishes (C(repo), C(revision), C(commit), C(files), C(total_bytes)).
  returned: always
  type: list
  elements: dict
senders:
  description: On the head, the rsync senders of any mirror stream running (V(pid), V(cmdline), V(unit), V(uid)).
  returned: always
  type: list
  elements: dict
report:
  description: The staging report (M(laguna.spark.status_report)'s C(report) for kind staging) of the copies as read.
  returned: always
  type: dict
now:
  description: The node's clock when the module finished, in seconds since the epoch.
  returned: always
  type: float
"""

import os
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.laguna.spark.plugins.module_utils import hashcache, model_stage, staging_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        artifacts=dict(type="list", elements="dict", required=True),
        is_head=dict(type="bool", default=True),
        head_artifacts=dict(type="list", elements="dict", default=[]),
        head_senders=dict(type="list", elements="dict", default=[]),
        head_host=dict(type="str", default="the head"),
        mirror_login=dict(type="str"),
        use_source_path=dict(type="bool", default=False),
        shard_pattern=dict(type="str", default="*.safetensors"),
        hash_cache=dict(type="path", required=True),
        full=dict(type="bool", default=False),
        reserve_bytes=dict(type="int", default=0),
        endpoint=dict(type="str"),
        token=dict(type="str", no_log=True),
        timeout=dict(type="int", default=30),
    ))
    p = module.params
    artifacts = []
    for art in p["artifacts"]:
        path = (art.get("source_path") or art.get("path")) if p["use_source_path"] else art.get("path")
        if not art.get("name") or not path or (p["is_head"] and not art.get("repo")):
            module.fail_json(msg="each artifact needs a name and a path%s: %r" % (
                " and a repo" if p["is_head"] else "", art))
        path = str(path)
        shards = art.get("expected_shards")
        artifacts.append(dict(
            art, path=path, expected_shards=None if shards in (None, "", "None") else int(shards),
            fix_ignore=boolean(art.get("fix_ignore") or False, strict=False),
            mirror_dest=art.get("mirror_dest") or ("%s:%s" % (p["mirror_login"], path) if p["mirror_login"] else None)))
    cache = hashcache.HashCache.load(p["hash_cache"], ignore=p["full"])
    exclude = (os.getpid(), os.getppid())
    try:
        if p["is_head"]:
            endpoint, fetch = model_stage.hub_fetcher(p["endpoint"], p["token"], p["timeout"])

            def ask_hub(repo, revision):
                try:
                    return model_stage.hub_manifest(fetch, endpoint, repo, revision)
                except Exception as exc:  # HTTPError, URLError, ValueError: all mean "cannot tell"
                    module.fail_json(msg="cannot read %s@%s from %s: %s" % (repo, revision, endpoint, exc))
                    raise  # not reached
            result = staging_probe.probe_head(artifacts, ask_hub, cache, p["shard_pattern"], p["reserve_bytes"],
                                              p["head_host"], exclude=exclude)
        else:
            result = staging_probe.probe_worker(artifacts, p["head_artifacts"], cache, p["shard_pattern"],
                                                p["reserve_bytes"], p["head_senders"], p["head_host"],
                                                exclude=exclude)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="cannot read the checkpoints: %s" % exc)
    if cache.hashed and not module.check_mode:
        cache.save(p["hash_cache"], module)
    for art in result["artifacts"]:
        if art.get("extras_warning"):
            module.warn(art["extras_warning"])
    module.exit_json(changed=False, now=time.time(), **result)


if __name__ == "__main__":
    main()
