"""Unit tests of the staging modules: checksums and their record, the Hub's
manifest (from the Hub double, in-process), verification and repair,
parallel mirroring (rsync over a local stand-in for ssh), progress, page cache."""
import hashlib
import json
import os
import re
import stat
import time

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import hashcache, mirror, model_stage, page_cache
from ansible_collections.laguna.spark.plugins.modules import (hf_repo_manifest, model_mirror, model_verify,
                                                              page_cache as page_cache_module, transfer_progress)

from conftest import HUB_REPO as REPO


def copy_tree(src, dst):
    dst.mkdir(parents=True)
    for path in src.iterdir():
        (dst / path.name).write_bytes(path.read_bytes())
    return dst


def corrupt_same_size(path, offset=100):
    st = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before


# --- The digest record ------------------------------------------------------------

def test_the_record_hashes_each_file_once_and_again_after_any_change(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 10000)
    cache = hashcache.HashCache()
    first = cache.digest(str(path))
    assert first["sha256"] == hashlib.sha256(b"a" * 10000).hexdigest()
    assert first["git_oid"] == hashlib.sha1(b"blob 10000\0" + b"a" * 10000).hexdigest()
    assert [h["reason"] for h in cache.hashed] == ["not hashed before"]
    reloaded = hashcache.HashCache(json.loads(cache.dump())["files"])
    assert reloaded.digest(str(path)) == first and reloaded.hashed == [] and reloaded.reused == 1
    corrupt_same_size(path)
    again = reloaded.digest(str(path))
    assert again["sha256"] != first["sha256"]
    assert reloaded.hashed[0]["reason"].startswith("changed since last hashed (") and "ctime" in reloaded.hashed[0]["reason"]
    full = hashcache.HashCache(json.loads(reloaded.dump())["files"], ignore=True)
    full.digest(str(path))
    assert full.hashed[0]["reason"] == "full verification requested"


# --- What the Hub publishes -----------------------------------------------------

def test_hub_manifest_matches_the_files(hub, run_module):
    result = run_module(hf_repo_manifest, {"repo": REPO, "endpoint": hub["endpoint"]})
    assert not result.failed and len(result["commit"]) == 40
    files = result["files"]
    assert len(files) == 28
    shard = "model-00001-of-00024.safetensors"
    data = (hub["root"] / shard).read_bytes()
    assert files[shard] == {"size": 4096, "sha256": hashlib.sha256(data).hexdigest(),
                            "git_oid": hashlib.sha1(b"blob 4096\0" + data).hexdigest()}
    config = (hub["root"] / "config.json").read_bytes()
    assert files["config.json"]["sha256"] is None  # a regular git file: checked by its blob id
    assert files["config.json"]["git_oid"] == hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()


def test_a_branch_that_moved_is_named_and_a_commit_is_not_asked(hub, run_module):
    # What the fast no-op path records of the staging role's manifests, and asks the Hub again.
    result = run_module(hf_repo_manifest, {"repo": REPO, "endpoint": hub["endpoint"]})
    assert (result["repo"], result["revision"]) == (REPO, "main")
    staged = model_stage.staged_revisions([result, {"skipped": True}])
    assert staged == [{"repo": REPO, "revision": "main", "commit": result["commit"]}]
    endpoint, fetch = model_stage.hub_fetcher(hub["endpoint"], None, 5)
    assert model_stage.moved_revisions(staged, fetch, endpoint) == []
    # The double moves main to another commit with the same files.
    (hub["root"].parent / (hub["root"].name + ".commit")).write_text("moved-1\n")
    moved = run_module(hf_repo_manifest, {"repo": REPO, "endpoint": hub["endpoint"]})
    assert moved["commit"] != result["commit"] and moved["files"] == result["files"]
    assert model_stage.moved_revisions(staged, fetch, endpoint) == [
        "%s@main moved on the Hub to commit %s (staged: %s)" % (REPO, moved["commit"], result["commit"])]
    # A revision that is its commit cannot move: not asked.
    asked = len(hub["log"].read_text().splitlines())
    pinned = [{"repo": REPO, "revision": result["commit"], "commit": result["commit"]}]
    assert model_stage.moved_revisions(pinned, fetch, endpoint) == []
    assert len(hub["log"].read_text().splitlines()) == asked
    # A Hub that cannot tell is a reason too (the roles then run, and staging names the failure).
    gone = model_stage.moved_revisions([{"repo": "nobody/nothing", "revision": "main", "commit": "0" * 40}],
                                       fetch, endpoint)
    assert len(gone) == 1 and gone[0].startswith("cannot ask %s which commit nobody/nothing@main is on: " % endpoint)


def test_hub_manifest_of_an_unknown_repo_fails(hub, run_module):
    result = run_module(hf_repo_manifest, {"repo": "nobody/nothing", "endpoint": hub["endpoint"]})
    assert result.failed and "404" in result["msg"] and "nobody/nothing@main" in result["msg"]


# --- Verification and repair ------------------------------------------------------

def test_verify_finds_same_size_corruption_truncation_extras_and_strays(hub, run_module, tmp_path):
    files = run_module(hf_repo_manifest, {"repo": REPO, "endpoint": hub["endpoint"]})["files"]
    tree = copy_tree(hub["root"], tmp_path / "copy")
    record = str(tmp_path / "record.json")
    args = {"path": str(tree), "expected": files, "expected_shards": 24, "hash_cache": record}
    clean = run_module(model_verify, args)
    assert clean["complete"] and clean["verified"] == 28 and clean["shard_count"] == 24
    assert "hashed 28 file(s)" in clean["hashed_summary"] and not clean["changed"]
    assert run_module(model_verify, args)["hashed_summary"] == \
        "hashed nothing: 28 file(s) unchanged since their recorded digest"

    corrupt_same_size(tree / "model-00003-of-00024.safetensors")
    corrupt_same_size(tree / "config.json", offset=5)  # a regular git file: caught by its blob id
    os.truncate(tree / "model-00011-of-00024.safetensors", 100)
    (tree / "extra.bin").write_bytes(b"x")
    download = tree / ".cache" / "huggingface" / "download"
    download.mkdir(parents=True)
    (download / "abc.deadbeef.12345678.incomplete").write_bytes(b"partial")
    (download / "model-00003-of-00024.safetensors.metadata").write_text("commit\netag\n0\n")
    (download / "model-00003-of-00024.safetensors.lock").write_text("")

    checked = run_module(model_verify, args, check_mode=True)
    assert not checked["complete"] and checked["removed"] == [] and (tree / "extra.bin").exists()
    assert sorted(b["path"] for b in checked["bad"]) == [
        "config.json", "model-00003-of-00024.safetensors", "model-00011-of-00024.safetensors"]
    assert any("sha256" in b["why"] for b in checked["bad"]) and any("git blob id" in b["why"] for b in checked["bad"])
    assert "size 100, expected 4096" in " ".join(b["why"] for b in checked["bad"])
    assert checked["extra"] == ["extra.bin"]
    assert sorted(checked["stray"]) == [".cache/huggingface/download/abc.deadbeef.12345678.incomplete",
                                        ".cache/huggingface/download/model-00003-of-00024.safetensors.lock"]

    repaired = run_module(model_verify, dict(args, repair=True, extras="remove", clean_partials=True))
    assert repaired["changed"] and repaired["refetch"] == [
        "config.json", "model-00003-of-00024.safetensors", "model-00011-of-00024.safetensors"]
    assert not (tree / "model-00003-of-00024.safetensors").exists() and not (tree / "extra.bin").exists()
    # hf's metadata for a removed file goes too, or `hf download` would trust its etag and skip it.
    assert not (download / "model-00003-of-00024.safetensors.metadata").exists()
    assert os.listdir(download) == []
    after = run_module(model_verify, args)
    assert after["missing"] == repaired["refetch"] and after["bad"] == [] and after["extra"] == []


def test_verify_against_another_nodes_manifest_and_a_wrong_shard_count(tmp_path, run_module):
    head = tmp_path / "head"
    head.mkdir()
    for i in range(1, 4):
        (head / ("model-%05d-of-00003.safetensors" % i)).write_bytes(bytes([i]) * 1000)
    ref = run_module(model_verify, {"path": str(head), "expected": {
        p.name: {"size": 1000, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in head.iterdir()},
        "expected_shards": 3})
    assert ref["complete"]
    wrong = run_module(model_verify, {"path": str(head), "expected": ref["manifest"], "expected_shards": 24})
    assert not wrong["complete"] and "3 of 24 shards" in wrong["problems"]
    missing = run_module(model_verify, {"path": str(tmp_path / "none"), "expected": ref["manifest"]})
    assert missing["problems"] == ["directory is missing"] and len(missing["refetch"]) == 3


def test_files_the_list_does_not_name_are_warned_about_and_refused_only_when_vllm_would_read_them(
        hub, run_module, tmp_path):
    files = run_module(hf_repo_manifest, {"repo": REPO, "endpoint": hub["endpoint"]})["files"]
    tree = copy_tree(hub["root"], tmp_path / "copy")
    record = str(tmp_path / "record.json")
    (tree / "notes.txt").write_text("the user's own note")
    (tree / "old").mkdir()
    (tree / "old" / "config.json").write_text("{}")  # below the top directory: nothing reads it
    args = {"path": str(tree), "expected": files, "expected_shards": 24, "hash_cache": record,
            "repair": True, "extras": "warn"}
    warned = run_module(model_verify, args)
    assert warned["complete"] and warned["problems"] == [] and warned["shadowing_problem"] == ""
    assert warned["extra"] == ["notes.txt", "old/config.json"] and warned["removed"] == []
    # (Warnings of earlier modules in this process come first.)
    assert [w["event"]["msg"] for w in warned["warnings"]][-1] == (
        "%s: 2 file(s) that the checkpoint's file list does not name, left alone "
        "(neither compared nor mirrored): notes.txt, old/config.json" % tree)
    # The record keeps the list the tree was verified against.
    assert hashcache.HashCache.load(record).list_of(str(tree)) == sorted(files)

    # A stray shard copy, a config, a chat template: vLLM would read them.
    (tree / "model-00025-of-00024.safetensors").write_bytes(b"x")
    (tree / "hf_quant_config.json").write_text("{}")
    (tree / "chat_template.jinja").write_text("{{ x }}")
    refused = run_module(model_verify, args)
    assert not refused["complete"] and (tree / "notes.txt").exists()
    assert refused["shadowing"] == [{"path": "chat_template.jinja", "why": "a chat template"},
                                    {"path": "hf_quant_config.json", "why": "a config or tokenizer file"},
                                    {"path": "model-00025-of-00024.safetensors", "why": "a shard's name"}]
    assert refused["shadowing_problem"] == (
        "3 file(s) that the checkpoint's file list does not name would be read as part of the model: "
        "chat_template.jinja (a chat template), hf_quant_config.json (a config or tokenizer file), "
        "model-00025-of-00024.safetensors (a shard's name); move them out from %s (or delete them), then rerun"
        % tree)
    assert refused["problems"] == [refused["shadowing_problem"]]
    # extras=ignore leaves them out of the problems, and still says which would shadow a model file.
    ignored = run_module(model_verify, dict(args, extras="ignore"), check_mode=True)
    assert ignored["complete"] and ignored["shadowing_problem"] == refused["shadowing_problem"]


def test_model_stage_info_counts_and_compares_what_the_recorded_list_names(tmp_path, run_module):
    from ansible_collections.laguna.spark.plugins.modules import model_stage_info
    head = tmp_path / "head"
    head.mkdir()
    names = ["config.json"] + ["model-%05d-of-00002.safetensors" % i for i in (1, 2)]
    for name in names:
        (head / name).write_bytes(b"x" * 10)
    record = tmp_path / "record.json"
    cache = hashcache.HashCache()
    cache.record_list(str(head), names)
    record.write_text(cache.dump())
    (head / "notes.txt").write_text("a note")
    args = {"path": str(head), "expected_shards": 2, "hash_cache": str(record)}
    listed = run_module(model_stage_info, args)
    assert listed["complete"] and listed["named"] and listed["problems"] == []
    assert sorted(listed["manifest"]) == names and listed["total_bytes"] == 30
    assert listed["extra"] == ["notes.txt"] and listed["shadowing"] == []
    # Without a record (or a list for this tree), every file counts, as before.
    unlisted = run_module(model_stage_info, {"path": str(head), "expected_shards": 2})
    assert not unlisted["named"] and "notes.txt" in unlisted["manifest"] and unlisted["extra"] == []
    # A named file missing, and a stray shard copy, are problems naming them.
    (head / "config.json").unlink()
    (head / "model-00003-of-00002.safetensors").write_bytes(b"x")
    broken = run_module(model_stage_info, args)
    assert not broken["complete"] and broken["shard_count"] == 2
    assert broken["problems"] == [
        "1 file(s) missing: config.json",
        "1 file(s) that the checkpoint's file list does not name would be read as part of the model: "
        "model-00003-of-00002.safetensors (a shard's name); move them out from %s (or delete them), then rerun" % head]


def test_free_space_is_measured_on_the_nearest_existing_parent(tmp_path):
    stat = os.statvfs(tmp_path)
    free, measured = model_stage.free_space(str(tmp_path / "not" / "yet" / "there"))
    assert measured == str(tmp_path)
    # The same filesystem, a moment later: equal up to what other writers did meanwhile.
    assert abs(free - stat.f_bavail * stat.f_frsize) < 64 << 20


def test_space_problem_names_the_shortfall_and_the_fix():
    assert model_stage.space_problem("/m", [], 0) == ""
    assert model_stage.space_problem("/m", [600, 400], 1000) == ""
    assert model_stage.space_problem("/m", [600, 400], 1999, reserve=1000) != ""
    msg = model_stage.space_problem("/m", [2 * 10**9, 10**9], 10**9, reserve=10**9)
    assert msg == ("2 file(s) to fetch into /m need 3.00 GB plus a reserve of 1.00 GB, and 1.00 GB is free on "
                   "its filesystem: free 3.00 GB there (or point the path at a larger disk), then rerun; "
                   "nothing was fetched")


def test_verify_reports_the_bytes_to_fetch_against_the_free_space(tmp_path, run_module):
    head = tmp_path / "head"
    head.mkdir()
    (head / "model-00001-of-00002.safetensors").write_bytes(b"a" * 1000)
    expected = {"model-00001-of-00002.safetensors": {"size": 1000, "sha256": hashlib.sha256(b"a" * 1000).hexdigest()},
                "model-00002-of-00002.safetensors": {"size": 3000, "sha256": "0" * 64}}
    fits = run_module(model_verify, {"path": str(head), "expected": expected})
    assert fits["refetch"] == ["model-00002-of-00002.safetensors"] and fits["refetch_bytes"] == 3000
    assert fits["space_problem"] == "" and fits["free_bytes"] > 3000
    # A reserve a terabyte beyond what is free: the shortfall is reported, nothing is removed.
    short = run_module(model_verify, {"path": str(head), "expected": expected,
                                      "reserve_bytes": fits["free_bytes"] + 10**12})
    assert short["space_problem"].startswith("1 file(s) to fetch into %s need 0.00 GB plus a reserve" % head)
    assert not short["changed"]


def test_stale_downloads_are_found_by_their_local_dir(tmp_path):
    import subprocess
    fake = tmp_path / "hf"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    proc = subprocess.Popen([str(fake), "download", "x/y", "--local-dir", str(tmp_path / "m")])
    try:
        time.sleep(0.2)
        assert model_stage.download_processes(str(tmp_path / "m")) == [proc.pid]
        assert model_stage.download_processes(str(tmp_path / "other")) == []
    finally:
        proc.kill()
        proc.wait()


# --- Parallel mirroring ---------------------------------------------------------------

def test_plan_balances_the_streams():
    files = {"a": 10, "b": 9, "c": 5, "d": 4, "e": 1}
    plan = mirror.plan(files, 2)
    assert sorted(sum(files[f] for f in part) for part in plan) == [14, 15]
    assert mirror.plan(files, 8) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    argv = mirror.rsync_argv("rsync", ["--archive"], "ssh -c aes128-gcm@openssh.com", "/s", "u@h:/d")
    assert "--inplace" not in argv and "--partial-dir=.cache/laguna-rsync-partial" in argv
    assert "--temp-dir=.cache/laguna-rsync-tmp" in argv and argv[-2:] == ["/s/", "u@h:/d/"]


@pytest.fixture
def local_rsh(tmp_path):
    """An rsh that runs the remote command here (rsync's own protocol, no ssh)."""
    rsh = tmp_path / "rsh"
    rsh.write_text("#!/bin/sh\nshift\nexec \"$@\"\n")
    rsh.chmod(0o755)
    return str(rsh)


def test_model_mirror_copies_over_parallel_streams_and_reports_progress(tmp_path, local_rsh, run_module):
    src = tmp_path / "src"
    src.mkdir()
    files = {}
    for i in range(6):
        name = "model-%05d-of-00006.safetensors" % (i + 1)
        (src / name).write_bytes(os.urandom(200000 + i))
        files[name] = 200000 + i
    dest = tmp_path / "dest"
    (dest / ".cache" / "laguna-rsync-tmp").mkdir(parents=True)
    progress = tmp_path / "progress.json"
    result = run_module(model_mirror, {"src": str(src), "dest": "node:%s" % dest, "files": files, "streams": 3,
                                       "rsh": local_rsh, "progress_file": str(progress)})
    assert not result.failed, result
    assert result["changed"] and len(result["streams"]) == 3 and all(s["rc"] == 0 for s in result["streams"])
    assert sorted(line.split(" ", 1)[1] for line in result["transfers"] if line[1] == "f") == sorted(files)
    assert all((dest / n).read_bytes() == (src / n).read_bytes() for n in files)
    assert json.loads(progress.read_text())["done"] == sum(files.values())
    assert result["summary"].startswith("mirrored 0.00 GB in ") and "3 stream(s)" in result["summary"]
    checked = run_module(model_mirror, {"src": str(src), "dest": "node:%s" % dest, "files": files,
                                        "rsh": local_rsh}, check_mode=True)
    assert not checked["changed"]


# --- Progress -------------------------------------------------------------------------

def test_transfer_progress_waits_and_reports(tmp_path, run_module):
    results = tmp_path / "job"
    results.write_text(json.dumps({"started": 1, "finished": 0}))
    progress = tmp_path / "p.json"
    progress.write_text(json.dumps({"done": 250000000}))
    began = time.monotonic()
    running = run_module(transfer_progress, {"results_file": str(results), "wait": 1, "total": 1000000000,
                                             "started": time.time() - 10, "progress_file": str(progress),
                                             "label": "mirror target", "timeout": 3600})
    assert time.monotonic() - began >= 1 and not running["finished"]
    assert re.match(r"mirror target: 0\.25 of 1\.00 GB \(25\.0%\), 0\.02\d GB/s, 1[01] s$", running["msg"])
    results.write_text(json.dumps({"rc": 0, "changed": True}))
    tree = tmp_path / "t"
    (tree / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (tree / "a").write_bytes(b"x" * 100)
    (tree / ".cache" / "huggingface" / "download" / "b.etag.1234.incomplete").write_bytes(b"x" * 50)
    done = run_module(transfer_progress, {"results_file": str(results), "wait": 30, "total": 200,
                                          "started": time.time(), "path": str(tree), "expected": ["a", "b"],
                                          "timeout": 3600})
    assert done["finished"] and done["done"] == 150


def test_transfer_progress_keeps_waiting_until_the_job_ends_or_its_wrapper_is_long_gone(tmp_path, run_module):
    # async_wrapper writes {"started": 1, "finished": 0} when the job starts and
    # rewrites the file only when it ends: its mtime is when the job started.
    results = tmp_path / "job"
    results.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "1.2"}))
    args = {"results_file": str(results), "wait": 0, "total": 100, "timeout": 60,
            "started": time.time() - 3600, "label": "download target"}
    # Running, started just now (the file's mtime, not `started`): keep waiting.
    fresh = run_module(transfer_progress, args)
    assert fresh["keep_waiting"] and not fresh["expired"] and not fresh["finished"]
    assert "gone" not in fresh["msg"]
    # Still "started" more than timeout + wait (+ the wrapper's slack) after it
    # started: the wrapper would have written its timeout result; it is gone.
    long_ago = time.time() - (60 + 0 + transfer_progress.WRAPPER_SLACK + 30)
    os.utime(results, (long_ago, long_ago))
    gone = run_module(transfer_progress, args)
    assert gone["expired"] and not gone["keep_waiting"] and not gone["finished"]
    assert re.search(r", no result after 1\d\d s: the job's wrapper is gone$", gone["msg"]), gone["msg"]
    # A finished job (here the wrapper's own timeout result, without "started")
    # is neither waited for nor expired, however old.
    results.write_text(json.dumps({"msg": "Timeout exceeded", "failed": True, "child_pid": 1}))
    os.utime(results, (long_ago, long_ago))
    ended = run_module(transfer_progress, args)
    assert ended["finished"] and not ended["keep_waiting"] and not ended["expired"]
    assert ended["msg"].endswith(", finished")
    # No results file (yet): when the job started is `started`, long ago here.
    results.unlink()
    missing = run_module(transfer_progress, args)
    assert missing["expired"] and not missing["keep_waiting"] and not missing["finished"]
    assert "the job's wrapper is gone" in missing["msg"]
    assert not run_module(transfer_progress, dict(args, started=time.time()))["expired"]


# --- Page cache ---------------------------------------------------------------------

def test_page_cache_reports_in_check_mode_and_drops(tmp_path, run_module):
    tree = tmp_path / "m"
    tree.mkdir()
    blob = tree / "model.safetensors"
    blob.write_bytes(os.urandom(8 << 20))
    blob.read_bytes()
    assert page_cache.cached_bytes(str(blob)) == 8 << 20
    checked = run_module(page_cache_module, {"paths": [str(tree), str(tmp_path / "none")]}, check_mode=True)
    assert checked["changed"] and checked["cached_bytes"] == 8 << 20 and checked["cached_after"] == 8 << 20
    assert checked["msg"].startswith("would drop 0.01 GB") and not checked["trees"][str(tmp_path / "none")]["exists"]
    assert page_cache.cached_bytes(str(blob)) == 8 << 20
    dropped = run_module(page_cache_module, {"paths": [str(tree)]})
    assert dropped["changed"] and dropped["cached_after"] < (1 << 20)
    assert page_cache.cached_bytes(str(blob)) < (1 << 20)
    again = run_module(page_cache_module, {"paths": [str(tree)]})
    assert not again["changed"] and again["msg"].startswith("dropped 0.00 GB")
