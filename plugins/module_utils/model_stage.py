# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What of a model checkpoint is on disk: shards, partial downloads, sizes."""

from __future__ import annotations

import fnmatch
import json
import os

from ansible.module_utils.urls import open_url

from ansible_collections.laguna.spark.plugins.module_utils import files, procs


def checkpoint_options():
    """The argument spec of the options that the doc fragment checkpoint
    documents (path, shard_pattern), for a module's own argument spec (a new
    dict each call)."""
    return dict(path=dict(type="path", required=True), shard_pattern=dict(type="str", default="*.safetensors"))


def scan(path, shard_pattern="*.safetensors", exclude=(".cache",), names=None):
    """Walk ``path`` and describe it.

    ``manifest`` maps each file (relative path) to its size, leaving out
    directories named in ``exclude`` (hf's ``.cache`` metadata); ``incomplete``
    lists every ``*.incomplete`` file anywhere below ``path``, ``.cache``
    included, because that is where `hf download` keeps its partial files.
    With ``names`` (the checkpoint's file list) the manifest and the shards
    hold only the files it names; ``extra`` lists the others, ``missing`` the
    named files that are absent.
    """
    named = None if names is None else {os.path.normpath(str(n)) for n in names}
    result = {"path": path, "exists": os.path.isdir(path), "manifest": {}, "shards": [],
              "incomplete": [], "total_bytes": 0, "extra": [], "missing": [], "named": named is not None}
    if not result["exists"]:
        result["missing"] = sorted(named or ())
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
            if named is not None and rel not in named:
                result["extra"].append(rel)
                continue
            try:
                size = os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
            result["manifest"][rel] = size
            result["total_bytes"] += size
            if rel_root == "." and fnmatch.fnmatch(name, shard_pattern):
                result["shards"].append(rel)
    if named is not None:
        result["missing"] = sorted(named - set(result["manifest"]))
    return result


def verdict(scanned, expected_shards=None, reference=None, shard_pattern="*.safetensors"):
    """Whether a scan is a complete copy, and why not.

    ``expected_shards`` None means "at least one"; ``reference`` is another
    scan's manifest that this one must equal file for file and byte for byte.
    A scan with a file list (``names``) must have every file it names, and no
    other file that would be read as part of the model.
    """
    problems = []
    found = len(scanned["shards"])
    if not scanned["exists"]:
        problems.append("directory is missing")
    elif expected_shards is None and found == 0:
        problems.append("no shards found")
    elif expected_shards is not None and found != expected_shards:
        problems.append("%d of %d shards" % (found, expected_shards))
    if scanned["exists"] and scanned.get("missing"):
        problems.append("%d file(s) missing: %s" % (len(scanned["missing"]), ", ".join(scanned["missing"][:5])))
    if scanned["incomplete"]:
        problems.append("%d *.incomplete file(s): %s" % (
            len(scanned["incomplete"]), ", ".join(scanned["incomplete"][:5])))
    shadow = shadowing_problem(shadowing(scanned.get("extra") or [], shard_pattern), scanned.get("path"))
    if shadow:
        problems.append(shadow)
    if reference is not None and scanned["exists"]:
        mine = scanned["manifest"]
        missing = sorted(set(reference) - set(mine))
        differ = sorted(f for f in reference if f in mine and mine[f] != reference[f])
        if missing:
            problems.append("%d file(s) missing vs. reference: %s" % (len(missing), ", ".join(missing[:5])))
        if differ:
            problems.append("%d file(s) differ in size vs. reference: %s" % (len(differ), ", ".join(differ[:5])))
    return not problems, problems


# --- Files a checkpoint's file list does not name --------------------------------

# What vLLM and transformers read from a checkpoint directory by its name or
# suffix, besides the shards: configs (vLLM globs *.json for a quantization
# config), tokenizer files, a chat template, remote code, other weights.
MODEL_SUFFIXES = {".safetensors": "weights", ".bin": "weights", ".pt": "weights", ".pth": "weights",
                  ".gguf": "weights", ".json": "a config or tokenizer file", ".jinja": "a chat template",
                  ".py": "remote code", ".model": "a tokenizer file", ".tiktoken": "a tokenizer file"}
MODEL_NAMES = {"merges.txt": "a tokenizer file", "vocab.txt": "a tokenizer file"}


def shadowing(extra, shard_pattern="*.safetensors"):
    """Of ``extra`` (files outside the checkpoint's file list), those that vLLM
    or transformers would read as part of the model: top-level files with a
    shard's name, a weights, config, tokenizer, chat template or code suffix.
    [{path, why}]."""
    found = []
    for rel in extra:
        if os.sep in rel:
            continue
        suffix = os.path.splitext(rel)[1].lower()
        if fnmatch.fnmatch(rel, shard_pattern):
            why = "a shard's name"
        else:
            why = MODEL_NAMES.get(rel) or MODEL_SUFFIXES.get(suffix)
        if why:
            found.append({"path": rel, "why": why})
    return found


def shadowing_problem(found, path=None):
    """'' when nothing in ``found`` (a shadowing() result) would be read as
    part of the model, else a sentence naming each file and the fix."""
    if not found:
        return ""
    where = " from %s" % path if path else ""
    return ("%d file(s) that the checkpoint's file list does not name would be read as part of the model: %s; "
            "move them out%s (or delete them), then rerun" % (
                len(found), ", ".join("%s (%s)" % (f["path"], f["why"]) for f in found), where))


# --- Checksums: the Hub's manifest, verification and repair -------------------

HF_CACHE = os.path.join(".cache", "huggingface")
RSYNC_PARTIAL = os.path.join(".cache", "laguna-rsync-partial")
RSYNC_TMP = os.path.join(".cache", "laguna-rsync-tmp")


DEFAULT_HUB = "https://huggingface.co"


def hub_fetcher(endpoint=None, token=None, timeout=30, opener=open_url):
    """(endpoint, fetch): the Hub to ask (``endpoint``, else E(HF_ENDPOINT), else
    huggingface.co) and fetch(url) -> the decoded JSON of a GET, sent with the
    token (``token``, else E(HF_TOKEN)) as hf does; raises on errors."""
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_HUB
    token = token or os.environ.get("HF_TOKEN")
    headers = {"Accept": "application/json", "User-Agent": "laguna.spark"}
    if token:
        headers["Authorization"] = "Bearer %s" % token

    def fetch(url):
        response = opener(url, headers=headers, timeout=timeout, follow_redirects="safe")
        return json.loads(response.read().decode("utf-8"))

    return endpoint, fetch


def hub_commit(fetch, endpoint, repo, revision="main", repo_type="model"):
    """The commit ``revision`` (a branch, tag or commit) of ``repo`` is on the Hub now."""
    info = fetch("%s/api/%ss/%s/revision/%s" % (endpoint.rstrip("/"), repo_type, repo, revision))
    commit = info.get("sha") if isinstance(info, dict) else None
    if not commit:
        raise ValueError("the Hub returned no commit for %s@%s" % (repo, revision))
    return commit


def pinned(revision, commit):
    """Whether ``revision`` is the commit itself (the Hub's sha, which cannot move; a branch or tag can)."""
    return revision == commit


def moved_revisions(staged, fetch, endpoint):
    """Sentences for each staged {repo, revision, commit} whose revision is on
    another commit now (or that the Hub cannot tell); empty when none moved.
    A revision that is its own commit is not asked."""
    reasons = []
    for entry in staged:
        repo, revision, commit = entry.get("repo"), entry.get("revision"), entry.get("commit")
        if pinned(revision, commit):
            continue
        try:
            now = hub_commit(fetch, endpoint, repo, revision)
        except Exception as exc:  # HTTPError, URLError, ValueError: the Hub cannot tell
            reasons.append("cannot ask %s which commit %s@%s is on: %s" % (endpoint, repo, revision, exc))
            continue
        if now != commit:
            reasons.append("%s@%s moved on the Hub to commit %s (staged: %s)" % (repo, revision, now, commit))
    return reasons


def staged_revisions(manifests):
    """[{repo, revision, commit}] of hf_repo_manifest's results (a loop's, or one), in order."""
    found = []
    for result in manifests or []:
        if isinstance(result, dict) and result.get("repo") and result.get("commit"):
            found.append({"repo": result["repo"], "revision": result.get("revision") or "main",
                          "commit": result["commit"]})
    return found


def hub_manifest(fetch, endpoint, repo, revision="main", repo_type="model"):
    """What the Hub publishes for ``repo`` at ``revision``.

    ``fetch(url)`` returns the decoded JSON of a GET (and raises on errors).
    Returns ``(commit, files)`` with ``files`` mapping each path to
    ``{'size', 'sha256', 'git_oid'}``; ``sha256`` is the LFS object id (None
    for a regular git file, which is checked by its git blob id instead).
    """
    base = "%s/api/%ss/%s" % (endpoint.rstrip("/"), repo_type, repo)
    commit = hub_commit(fetch, endpoint, repo, revision, repo_type)
    files = {}
    url = "%s/tree/%s?recursive=true&expand=false" % (base, commit)
    for entry in fetch(url):
        if entry.get("type") != "file":
            continue
        lfs = entry.get("lfs") or {}
        files[entry["path"]] = {"size": int(lfs.get("size", entry.get("size", 0))),
                                "sha256": lfs.get("oid"), "git_oid": entry.get("oid")}
    return commit, files


def _cache_entry_kind(rel):
    """How a file under <tree>/.cache is treated: 'keep' (hf bookkeeping),
    'partial' (resumable rsync partial), or 'stray' (left by an interrupted run)."""
    parts = rel.split(os.sep)
    if parts[:2] == [".cache", "huggingface"]:
        rest = parts[2:]
        if rest in ([".gitignore"], ["CACHEDIR.TAG"]):
            return "keep"
        if len(rest) == 2 and rest[0] == "trees" and rest[1].endswith(".json"):
            return "keep"
        if len(rest) >= 2 and rest[0] == "download" and rest[-1].endswith(".metadata"):
            return "keep"
        return "stray"       # *.incomplete, *.lock, anything else
    if rel.startswith(RSYNC_PARTIAL + os.sep):
        return "partial"
    return "stray"


def walk_tree(path):
    """(files outside .cache, files under .cache) as sorted relative paths."""
    tree, cache = [], []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        rel_root = os.path.relpath(root, path)
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_root, name))
            (cache if rel.split(os.sep)[0] == ".cache" else tree).append(rel)
    return tree, cache


def verify(path, expected, cache, shard_pattern="*.safetensors", expected_shards=None,
           extras="report", repair=False, clean_partials=False, check_mode=False):
    """Check the tree at ``path`` file by file against ``expected`` (path ->
    {size, sha256 or git_oid}) by checksum, hashing through ``cache``.

    With ``repair`` (and not ``check_mode``) files that fail are removed, with
    hf's metadata for them, so that the next download or mirror fetches them
    again; ``extras='remove'`` removes files the reference does not have;
    ``clean_partials`` removes what interrupted runs left in ``.cache`` (and,
    with ``repair``, resumable rsync partials of files that are now good).
    """
    out = {"exists": os.path.isdir(path), "missing": [], "bad": [], "extra": [], "stray": [], "shadowing": [],
           "partial": [], "removed": [], "rewritten": [], "manifest": {}, "total_bytes": 0, "verified": 0}
    problems = []
    if not out["exists"]:
        out["missing"] = sorted(expected)
        problems.append("directory is missing")
        return False, problems, out
    tree, in_cache = walk_tree(path)
    present = set(tree)
    for rel in sorted(expected):
        want = expected[rel]
        full = os.path.join(path, rel)
        if rel not in present:
            out["missing"].append(rel)
            continue
        rewritten = cache.rewritten_from(full, want)
        if rewritten:
            got = cache.digest(full)
            if got["sha256"] == rewritten:
                # The recorded rewrite of exactly the published file.
                out["rewritten"].append(rel)
                out["verified"] += 1
                out["manifest"][rel] = {"size": got["size"], "sha256": got["sha256"], "git_oid": got["git_oid"]}
                out["total_bytes"] += got["size"]
                continue
        size = os.path.getsize(full)
        if size != int(want["size"]):
            out["bad"].append({"path": rel, "why": "size %d, expected %d" % (size, int(want["size"]))})
            continue
        got = cache.digest(full)
        if want.get("sha256"):
            ok, kind, wanted_digest, got_digest = got["sha256"] == want["sha256"], "sha256", want["sha256"], got["sha256"]
        elif want.get("git_oid"):
            ok, kind, wanted_digest, got_digest = got["git_oid"] == want["git_oid"], "git blob id", want["git_oid"], got["git_oid"]
        else:
            ok, kind = False, "checksum"
            wanted_digest, got_digest = "(none published)", got["sha256"]
        if not ok:
            out["bad"].append({"path": rel, "why": "%s %s, expected %s" % (kind, got_digest[:12], wanted_digest[:12])})
            continue
        out["verified"] += 1
        out["manifest"][rel] = {"size": size, "sha256": got["sha256"], "git_oid": got["git_oid"]}
        out["total_bytes"] += size
    out["extra"] = [rel for rel in tree if rel not in expected]
    out["shadowing"] = shadowing(out["extra"], shard_pattern)
    for rel in in_cache:
        kind = _cache_entry_kind(rel)
        if kind == "stray":
            out["stray"].append(rel)
        elif kind == "partial":
            out["partial"].append(rel)
    shards = [rel for rel in expected if os.sep not in rel and fnmatch.fnmatch(rel, shard_pattern)]
    out["shard_count"] = len([rel for rel in shards if rel in out["manifest"]])
    if expected_shards is not None and len(shards) != expected_shards:
        problems.append("%d of %d shards" % (len(shards), expected_shards))
    elif expected_shards is None and not shards:
        problems.append("no shards found")

    def remove(rel):
        if check_mode:
            return
        full = os.path.join(path, rel)
        cache.forget(full)
        try:
            os.unlink(full)
        except FileNotFoundError:
            return
        out["removed"].append(rel)

    if repair:
        for item in out["bad"]:
            remove(item["path"])
            remove(os.path.join(HF_CACHE, "download", item["path"] + ".metadata"))
    if extras == "remove" and repair:
        for rel in out["extra"]:
            remove(rel)
    if clean_partials:
        for rel in out["stray"]:
            remove(rel)
        if repair:
            # A partial of a file that is now complete and good is of no use.
            done = set(out["manifest"])
            for rel in out["partial"]:
                if os.path.relpath(os.path.join(path, rel), os.path.join(path, RSYNC_PARTIAL)) in done:
                    remove(rel)
        if not check_mode:
            for rel in (RSYNC_PARTIAL, RSYNC_TMP, ".cache"):
                directory = os.path.join(path, rel)
                if os.path.isdir(directory) and not os.listdir(directory):
                    os.rmdir(directory)
    if out["missing"]:
        problems.append("%d file(s) missing: %s" % (len(out["missing"]), ", ".join(out["missing"][:5])))
    if out["bad"]:
        problems.append("%d file(s) failed verification: %s" % (
            len(out["bad"]), ", ".join("%s (%s)" % (b["path"], b["why"]) for b in out["bad"][:5])))
    if out["extra"] and extras in ("report", "remove"):
        problems.append("%d extra file(s): %s" % (len(out["extra"]), ", ".join(out["extra"][:5])))
    elif extras == "warn" and out["shadowing"]:
        problems.append(shadowing_problem(out["shadowing"], path))
    left_stray = [rel for rel in out["stray"] if rel not in out["removed"]]
    if left_stray:
        problems.append("%d partial or stray file(s) in .cache: %s" % (len(left_stray), ", ".join(left_stray[:5])))
    return not problems, problems, out


def download_processes(path, proc="/proc"):
    """PIDs of running `hf download ... --local-dir <path>` processes (a download
    an interrupted playbook left behind)."""
    found = []
    want = os.path.normpath(path)
    for pid, argv in procs.argvs(proc):
        if "download" not in argv or "--local-dir" not in argv:
            continue
        if not any(os.path.basename(a) in ("hf", "huggingface-cli") for a in argv[:3]):
            continue
        index = argv.index("--local-dir")
        if index + 1 < len(argv) and os.path.normpath(argv[index + 1]) == want:
            found.append(pid)
    return sorted(found)


def free_space(path):
    """Bytes an unprivileged writer may still use on the filesystem that holds
    ``path`` (or, while it does not exist yet, its nearest existing parent),
    and the directory measured."""
    probe = files.nearest(os.path.abspath(path), os.path.isdir)
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize, probe


def space_problem(path, sizes, free, reserve=0):
    """'' when files of ``sizes`` bytes fit into ``free`` bytes with ``reserve``
    bytes to spare, else a message naming the shortfall and the fix. hf and
    rsync both write into the tree's own .cache and rename in place, so a file
    needs its own size once."""
    need = sum(int(size) for size in sizes)
    if not sizes or need + reserve <= free:
        return ""
    return ("%d file(s) to fetch into %s need %.2f GB%s, and %.2f GB is free on its filesystem: "
            "free %.2f GB there (or point the path at a larger disk), then rerun; nothing was fetched" % (
                len(sizes), path, need / 1e9,
                " plus a reserve of %.2f GB" % (reserve / 1e9) if reserve else "",
                free / 1e9, (need + reserve - free) / 1e9))


# --- The checks as the modules (and the staging role's probe) return them ------


def hashed_summary(cache):
    """One line saying what ``cache`` (a HashCache) hashed in this run and why, or that nothing was."""
    if not cache.hashed:
        return "hashed nothing: %d file(s) unchanged since their recorded digest" % cache.reused
    total = sum(h["bytes"] for h in cache.hashed)
    reasons = {}
    for item in cache.hashed:
        reasons[item["reason"]] = reasons.get(item["reason"], 0) + 1
    return "hashed %d file(s), %.2f GB (%s); %d unchanged file(s) taken from the record" % (
        len(cache.hashed), total / 1e9, "; ".join("%d %s" % (n, r) for r, n in sorted(reasons.items())), cache.reused)


def normalized_expected(expected):
    """``expected`` (relative path -> {size, sha256 or git_oid}) with normalized
    paths; raises ValueError naming the first entry without a size."""
    found = {}
    for rel, want in (expected or {}).items():
        if not isinstance(want, dict) or "size" not in want:
            raise ValueError("expected[%s] must be a dict with size and sha256 or git_oid" % rel)
        found[os.path.normpath(str(rel))] = want
    return found


def extras_warning(path, extra):
    """The warning naming files outside the checkpoint's file list ('' when none)."""
    if not extra:
        return ""
    return ("%s: %d file(s) that the checkpoint's file list does not name, left alone (neither compared "
            "nor mirrored): %s" % (path, len(extra), ", ".join(extra[:10])))


def verify_checkpoint(path, expected, cache, shard_pattern="*.safetensors", expected_shards=None, extras="report",
                      repair=False, clean_partials=False, check_mode=False, reserve_bytes=0, record_list=False):
    """model_verify's result (all but ``stopped``, ``changed`` and ``now``):
    verify() of ``path`` against ``expected`` (normalized_expected()) through
    ``cache``, what is to fetch, and whether it fits. With ``record_list``
    (and not ``check_mode``) the cache prunes the tree's vanished files and
    records ``expected``'s names as the tree's file list; saving the cache is
    the caller's. Raises OSError when the tree cannot be read."""
    complete, problems, out = verify(path, expected, cache, shard_pattern, expected_shards, extras=extras,
                                     repair=repair, clean_partials=clean_partials, check_mode=check_mode)
    if record_list:
        cache.prune(path)
        if out["exists"] and not check_mode:
            cache.record_list(path, expected)
    refetch = sorted(set(out["missing"]) | {b["path"] for b in out["bad"]})
    sizes = [int(expected[rel]["size"]) for rel in refetch if rel in expected]
    free, _measured = free_space(path)
    return dict(
        out, shadowing_problem=shadowing_problem(out["shadowing"], path),
        refetch_bytes=sum(sizes), free_bytes=free, space_problem=space_problem(path, sizes, free, reserve_bytes),
        complete=complete, problems=problems, refetch=refetch,
        expected_bytes=sum(int(w["size"]) for w in expected.values()),
        hashed=list(cache.hashed), hashed_summary=hashed_summary(cache))


def stage_info(path, shard_pattern="*.safetensors", expected_shards=None, exclude=(".cache",), reference=None,
               names=None):
    """model_stage_info's result: scan() of ``path`` (the files ``names``, the
    tree's recorded file list, names, when given) and its verdict()."""
    scanned = scan(path, shard_pattern, tuple(exclude), names)
    if reference is not None:
        reference = {str(k): int(v) for k, v in reference.items()}
    complete, problems = verdict(scanned, expected_shards, reference, shard_pattern)
    return dict(
        complete=complete, problems=problems, shard_count=len(scanned["shards"]), shards=scanned["shards"],
        incomplete=scanned["incomplete"], manifest=scanned["manifest"], total_bytes=scanned["total_bytes"],
        exists=scanned["exists"], named=scanned["named"], extra=scanned["extra"], missing=scanned["missing"],
        shadowing=shadowing(scanned["extra"], shard_pattern))
