# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The staging role's one read per node (laguna.spark.staging_probe).

On the head, for each checkpoint: what the Hub publishes for its revision
(model_stage.hub_manifest, asked from the head as hf download will be), the
head's copy verified against it through the digest record
(model_stage.verify_checkpoint, as model_verify checks it; the record lets a
file go unhashed only when its size, mtime, ctime, inode and device are those
it had when hashed), the hf downloads an interrupted run left writing it,
the tree's recorded file list, the draft's ignore list
(dflash_quant.fix_ignore_config), and what model_stage_info reads for the
status (model_stage.stage_info); for every checkpoint, the mirror streams an
interrupted run left sending from the head (mirror.stream_patterns).

On a worker, for each checkpoint: its copy verified against the head's
verified copy (the head's read, passed in), the receivers of an interrupted
mirror writing it, of the head's senders those sending here, the recorded
file list, and the status read.

Nothing is changed but the digest record: digests computed here are kept
(outside check mode), as model_verify keeps them, so that the tasks that act
after it do not hash the same bytes again. The decisions: a checkpoint is
``act`` when anything the role's download, mirror or repair tasks would do
is to be done on it, each reason one line of ``differences``.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.laguna.spark.plugins.module_utils import dflash_quant, mirror, model_stage, procs, status_reports

# Every mirror stream's sender (rsync's client on the head), to any worker:
# mirror.stream_patterns(dest)["senders"] picks out one worker's.
ANY_SENDER = r"^\S*rsync .* --partial-dir=%s " % re.escape(mirror.PARTIAL_DIR)


def _pids(found):
    return ", ".join(str(p["pid"]) for p in found)


def list_recorded(cache, path, names):
    """Whether the digest record lists exactly ``names`` as ``path``'s file list."""
    return cache.list_of(path) == sorted(os.path.normpath(str(n)) for n in names)


def ignore_changes(path):
    """The ignore entries dflash_draft_ignore would rewrite in ``path``/config.json
    ({} when none, or when there is no readable config.json to rewrite yet)."""
    try:
        with open(os.path.join(path, "config.json"), "rb") as handle:
            config = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    return dflash_quant.fix_ignore_config(config)[1]


def head_artifact(art, files, commit, cache, shard_pattern="*.safetensors", reserve_bytes=0, proc="/proc"):
    """The head's read of one checkpoint ``art`` ({name, path, repo, revision,
    expected_shards, fix_ignore}) against the Hub's ``files`` at ``commit``."""
    path, name = art["path"], art["name"]
    expected = model_stage.normalized_expected(files)
    downloads = model_stage.download_processes(path, proc)
    verified = model_stage.verify_checkpoint(path, expected, cache, shard_pattern, art.get("expected_shards"),
                                             extras="ignore", check_mode=True, reserve_bytes=reserve_bytes)
    recorded = list_recorded(cache, path, expected)
    changes = ignore_changes(path) if art.get("fix_ignore") and verified["exists"] else {}
    differences = []
    if downloads:
        differences.append("%s: an hf download an interrupted run left writing %s (pid %s)" % (
            name, path, ", ".join(str(p) for p in downloads)))
    if verified["refetch"]:
        differences.append("%s: %d file(s), %.2f GB, to download from %s@%s: %s" % (
            name, len(verified["refetch"]), verified["refetch_bytes"] / 1e9, art.get("repo"), commit[:12],
            "; ".join(p for p in verified["problems"] if "partial or stray" not in p)))
    if verified["stray"] or verified["partial"]:
        differences.append("%s: %d partial or stray file(s) in %s/.cache to remove: %s" % (
            name, len(verified["stray"] + verified["partial"]), path,
            ", ".join((verified["stray"] + verified["partial"])[:5])))
    if verified["exists"] and not recorded:
        differences.append("%s: the digest record does not list the Hub's %d file(s) as %s's file list" % (
            name, len(expected), path))
    if changes:
        differences.append("%s: %d ignore entr%s of %s/config.json to rewrite as regexes vLLM matches" % (
            name, len(changes), "y" if len(changes) == 1 else "ies", path))
    return {"name": name, "path": path, "repo": art.get("repo"), "revision": art.get("revision"), "commit": commit,
            "verify": verified, "downloads": downloads, "list_recorded": recorded, "ignore_changes": changes,
            "extras_warning": model_stage.extras_warning(path, verified["extra"]),
            "differences": differences, "act": bool(differences)}


def worker_artifact(art, head, cache, shard_pattern="*.safetensors", reserve_bytes=0, head_senders=(),
                    head_host="the head", proc="/proc", exclude=()):
    """A worker's read of one checkpoint ``art`` ({name, path, expected_shards,
    mirror_dest}) against ``head``, the head's read of it (head_artifact())."""
    path, name = art["path"], art["name"]
    patterns = mirror.stream_patterns(art["mirror_dest"]) if art.get("mirror_dest") else None
    senders = [s for s in head_senders or () if patterns and re.search(patterns["senders"], s.get("cmdline") or "")]
    receivers = procs.matching(patterns["receivers"], proc, exclude=exclude) if patterns else []
    differences = []
    if senders or receivers:
        differences.append("%s: the mirror an interrupted run left running: senders pid %s on %s, receivers pid %s "
                           "here" % (name, _pids(senders) or "none", head_host, _pids(receivers) or "none"))
    verified, recorded = None, False
    if not head or head.get("act") or not head.get("verify"):
        differences.append("%s: %s stages its copy in this run; this copy is compared with it then" % (
            name, head_host))
    else:
        expected = model_stage.normalized_expected(head["verify"].get("manifest") or {})
        verified = model_stage.verify_checkpoint(path, expected, cache, shard_pattern, art.get("expected_shards"),
                                                 extras="remove", check_mode=True, reserve_bytes=reserve_bytes)
        recorded = list_recorded(cache, path, expected)
        if verified["refetch"]:
            differences.append("%s: %d file(s), %.2f GB, to mirror from %s: %s" % (
                name, len(verified["refetch"]), verified["refetch_bytes"] / 1e9, head_host,
                "; ".join(p for p in verified["problems"]
                          if "partial or stray" not in p and "extra file" not in p)))
        if verified["extra"]:
            differences.append("%s: %d file(s) that %s's copy does not have, to remove: %s" % (
                name, len(verified["extra"]), head_host, ", ".join(verified["extra"][:5])))
        if verified["stray"] or verified["partial"]:
            differences.append("%s: %d partial or stray file(s) in %s/.cache to remove: %s" % (
                name, len(verified["stray"] + verified["partial"]), path,
                ", ".join((verified["stray"] + verified["partial"])[:5])))
        if verified["exists"] and not recorded:
            differences.append("%s: the digest record does not list %s's %d file(s) as %s's file list" % (
                name, head_host, len(expected), path))
    return {"name": name, "path": path, "verify": verified, "senders": senders, "receivers": receivers,
            "list_recorded": recorded, "differences": differences, "act": bool(differences)}


def scans(artifacts, cache, shard_pattern="*.safetensors"):
    """model_stage_info's result for each of ``artifacts`` (with ``item``), as the role's status tasks read them."""
    found = []
    for art in artifacts:
        info = model_stage.stage_info(art["path"], shard_pattern, art.get("expected_shards"),
                                      names=cache.list_of(art["path"]))
        info["item"] = {"name": art["name"], "path": art["path"]}
        found.append(info)
    return found


def probe_head(artifacts, ask_hub, cache, shard_pattern="*.safetensors", reserve_bytes=0, head_host="",
               proc="/proc", exclude=()):
    """The head's read. ``ask_hub(repo, revision)`` -> (commit, files)."""
    read, hubs = [], []
    for art in artifacts:
        revision = art.get("revision") or "main"
        commit, files = ask_hub(art["repo"], revision)
        hubs.append({"repo": art["repo"], "revision": revision, "commit": commit, "files": files,
                     "total_bytes": sum(int(f["size"]) for f in files.values())})
        read.append(head_artifact(dict(art, revision=revision), files, commit, cache, shard_pattern, reserve_bytes,
                                  proc))
    senders = procs.matching(ANY_SENDER, proc, exclude=exclude)
    found = scans(artifacts, cache, shard_pattern)
    for art, scan in zip(read, found):
        art["scan"] = scan
    differences = [d for art in read for d in art["differences"]]
    return {"artifacts": read, "hubs": hubs, "senders": senders, "differences": differences,
            "report": status_reports.staging(found, [], True, head_host)}


def probe_worker(artifacts, head_artifacts, cache, shard_pattern="*.safetensors", reserve_bytes=0, head_senders=(),
                 head_host="", proc="/proc", exclude=()):
    """A worker's read; ``head_artifacts``: the head's read of each checkpoint, in the same order."""
    head_artifacts = list(head_artifacts or [])
    read = []
    for index, art in enumerate(artifacts):
        head = head_artifacts[index] if index < len(head_artifacts) else None
        read.append(worker_artifact(art, head, cache, shard_pattern, reserve_bytes, head_senders, head_host,
                                    proc, exclude))
    found = scans(artifacts, cache, shard_pattern)
    for art, scan in zip(read, found):
        art["scan"] = scan
    head_scans = [(h or {}).get("scan") or {} for h in head_artifacts]
    differences = [d for art in read for d in art["differences"]]
    return {"artifacts": read, "hubs": [], "senders": [], "differences": differences,
            "report": status_reports.staging(found, head_scans, False, head_host)}
