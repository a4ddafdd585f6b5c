"""staging_probe / module_utils.staging_probe: the staging role's one read per node."""
import json
import os

from helpers import draft_fixtures as fx
from ansible_collections.laguna.spark.plugins.module_utils import hashcache, model_stage, staging_probe
from ansible_collections.laguna.spark.plugins.modules import model_stage_info, model_verify
from ansible_collections.laguna.spark.plugins.modules import staging_probe as staging_probe_module

COMMIT = "c0ffee" * 6 + "beef"
FILES = {"model-00001-of-00002.safetensors": b"a" * 100, "model-00002-of-00002.safetensors": b"b" * 80,
         "config.json": b'{"x": 1}\n'}


def tree(path, files=None):
    os.makedirs(path, exist_ok=True)
    for rel, data in (files or FILES).items():
        with open(os.path.join(path, rel), "wb") as handle:
            handle.write(data)
    return path


def published(files=None):
    """What the Hub publishes: LFS files by sha256, the others by git blob id."""
    found = {}
    for rel, data in (files or FILES).items():
        sha, oid = hashcache.digest_bytes(data)
        found[rel] = {"size": len(data), "sha256": sha if rel.endswith(".safetensors") else None, "git_oid": oid}
    return found


def art(path, **more):
    return dict({"name": "target", "path": path, "repo": "org/target", "revision": "main", "expected_shards": 2},
                **more)


def hub(files=None):
    asked = []

    def ask(repo, revision):
        asked.append((repo, revision))
        return COMMIT, files or published()
    ask.asked = asked
    return ask


def converged(path, record, expected=None):
    """The record a complete run leaves: every digest and the tree's file list."""
    cache = hashcache.HashCache.load(record)
    model_stage.verify_checkpoint(path, model_stage.normalized_expected(expected or published()), cache,
                                  record_list=True)
    os.makedirs(os.path.dirname(record), exist_ok=True)
    with open(record, "w") as handle:
        handle.write(cache.dump())
    return hashcache.HashCache.load(record)


def fake_proc(tmp_path, *argvs):
    proc = tmp_path / "proc"
    for pid, argv in enumerate(argvs, start=4000):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    proc.mkdir(parents=True, exist_ok=True)
    return str(proc)


def head_read(tmp_path, path, record, **more):
    return staging_probe.probe_head([art(path, **more)], hub(), hashcache.HashCache.load(record),
                                    head_host="head", proc=fake_proc(tmp_path))


# --- The head ----------------------------------------------------------------------


def test_a_head_as_wanted_has_no_difference_and_hashes_nothing(tmp_path):
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    ask = hub()
    cache = hashcache.HashCache.load(record)
    read = staging_probe.probe_head([art(path)], ask, cache, head_host="head", proc=fake_proc(tmp_path))
    assert read["differences"] == [] and not read["artifacts"][0]["act"]
    assert ask.asked == [("org/target", "main")]
    assert read["hubs"][0]["commit"] == COMMIT and read["hubs"][0]["total_bytes"] == 189
    verified = read["artifacts"][0]["verify"]
    assert verified["complete"] and verified["hashed"] == [] and verified["hashed_summary"].startswith("hashed nothing")
    assert read["report"]["ok"] and read["report"]["artifacts"][0]["summary"] == "target: 2 shard(s), 0.0 GB"
    assert read["artifacts"][0]["scan"]["named"]


def test_the_head_reads_as_model_verify_and_model_stage_info_do(tmp_path, run_module):
    """The probe calls the modules' code: the same results, key for key."""
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    (tmp_path / "t" / "notes.txt").write_text("mine")
    read = head_read(tmp_path, path, record)["artifacts"][0]
    verified = run_module(model_verify, {"path": path, "expected": published(), "hash_cache": record,
                                         "expected_shards": 2, "extras": "ignore"}, check_mode=True)
    for key in ("complete", "problems", "refetch", "manifest", "extra", "shadowing", "shadowing_problem", "missing",
                "bad", "stray", "partial", "shard_count", "hashed_summary"):
        assert read["verify"][key] == verified[key], key
    info = run_module(model_stage_info, {"path": path, "hash_cache": record, "expected_shards": 2})
    for key in ("complete", "problems", "manifest", "extra", "shadowing", "shard_count", "named"):
        assert read["scan"][key] == info[key], key
    assert read["extras_warning"].endswith("left alone (neither compared nor mirrored): notes.txt")
    assert read["differences"] == []


def test_a_missing_and_a_corrupted_file_are_to_download(tmp_path):
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    os.unlink(os.path.join(path, "config.json"))
    shard = os.path.join(path, "model-00001-of-00002.safetensors")
    stat = os.stat(shard)
    with open(shard, "r+b") as handle:  # same size, mtime put back: the ctime in the record tells
        handle.write(b"z")
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    read = head_read(tmp_path, path, record)
    target = read["artifacts"][0]
    assert target["act"] and target["verify"]["refetch"] == ["config.json", "model-00001-of-00002.safetensors"]
    assert target["verify"]["hashed"][0]["reason"] == "changed since last hashed (ctime)"
    assert read["differences"][0].startswith("target: 2 file(s), 0.00 GB, to download from org/target@c0ffeec0ffee: ")
    assert "sha256" in read["differences"][0] and "config.json" in read["differences"][0]


def test_a_missing_checkpoint_is_to_download(tmp_path):
    read = head_read(tmp_path, str(tmp_path / "none"), str(tmp_path / "sha256.json"))
    assert read["artifacts"][0]["act"] and len(read["artifacts"][0]["verify"]["refetch"]) == 3
    assert not read["report"]["ok"]


def test_partial_downloads_and_a_download_left_running_are_differences(tmp_path):
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    partial = tmp_path / "t" / ".cache" / "huggingface" / "download"
    partial.mkdir(parents=True)
    (partial / "x.incomplete").write_text("half")
    proc = fake_proc(tmp_path, ["/v/bin/hf", "download", "org/target", "--local-dir", path],
                     ["/v/bin/hf", "download", "org/target", "--local-dir", path + "-other"])
    read = staging_probe.probe_head([art(path)], hub(), hashcache.HashCache.load(record), proc=proc)
    target = read["artifacts"][0]
    assert target["downloads"] == [4000] and target["act"]
    assert any("an hf download an interrupted run left writing" in d and "(pid 4000)" in d
               for d in read["differences"])
    assert any("1 partial or stray file(s)" in d and "x.incomplete" in d for d in read["differences"])


def test_a_file_list_the_record_does_not_hold_is_a_difference(tmp_path):
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    data = json.load(open(record))
    del data["lists"]
    with open(record, "w") as handle:
        json.dump(data, handle)
    read = head_read(tmp_path, path, record)
    assert read["artifacts"][0]["act"] and not read["artifacts"][0]["list_recorded"]
    assert read["differences"] == ["target: the digest record does not list the Hub's 3 file(s) as %s's file list"
                                   % path]


def test_a_draft_ignore_list_to_rewrite_is_a_difference_only_when_asked(tmp_path):
    path = fx.make_draft(str(tmp_path / "draft"), "literal", 1)
    files = {rel: open(os.path.join(path, rel), "rb").read() for rel in os.listdir(path)}
    record = str(tmp_path / "sha256.json")
    converged(path, record, published(files))
    draft = dict(art(path, expected_shards=None), name="draft")
    cache = hashcache.HashCache.load(record)
    plain = staging_probe.probe_head([draft], hub(published(files)), cache, proc=fake_proc(tmp_path))
    assert plain["differences"] == []
    fix = staging_probe.probe_head([dict(draft, fix_ignore=True)], hub(published(files)), cache,
                                   proc=fake_proc(tmp_path))
    assert fix["artifacts"][0]["ignore_changes"] and fix["artifacts"][0]["act"]
    assert "ignore entr" in fix["differences"][0] and "to rewrite as regexes vLLM matches" in fix["differences"][0]


def test_the_head_lists_every_mirror_sender_and_no_receiver(tmp_path):
    sender = ["rsync", "--archive", "--partial-dir=.cache/laguna-rsync-partial", "--temp-dir=.cache/laguna-rsync-tmp",
              "--files-from=-", "/m/t/", "spark@10.0.0.2:/m/t/"]
    receiver = ["rsync", "--server", "-logDtpre.iLsfxCIvu", "--partial-dir", ".cache/laguna-rsync-partial", ".",
                "/m/t/"]
    path, record = tree(str(tmp_path / "t")), str(tmp_path / "cache" / "sha256.json")
    converged(path, record)
    read = staging_probe.probe_head([art(path)], hub(), hashcache.HashCache.load(record),
                                    proc=fake_proc(tmp_path, sender, receiver))
    assert [s["pid"] for s in read["senders"]] == [4000]


# --- A worker ----------------------------------------------------------------------


def worker_case(tmp_path):
    head, head_record = tree(str(tmp_path / "head")), str(tmp_path / "head.json")
    converged(head, head_record)
    head_state = staging_probe.probe_head([art(head)], hub(), hashcache.HashCache.load(head_record),
                                          head_host="head", proc=fake_proc(tmp_path / "h"))
    worker, record = tree(str(tmp_path / "worker")), str(tmp_path / "worker.json")
    converged(worker, record, head_state["artifacts"][0]["verify"]["manifest"])
    return head_state, worker, record


def worker_read(tmp_path, head_state, worker, record, senders=(), proc=None):
    return staging_probe.probe_worker(
        [{"name": "target", "path": worker, "expected_shards": 2, "mirror_dest": "spark@10.0.0.2:" + worker}],
        head_state["artifacts"], hashcache.HashCache.load(record), head_senders=senders or head_state["senders"],
        head_host="head", proc=proc or fake_proc(tmp_path / "w"))


def test_a_worker_as_wanted_has_no_difference(tmp_path):
    head_state, worker, record = worker_case(tmp_path)
    read = worker_read(tmp_path, head_state, worker, record)
    assert read["differences"] == [] and not read["artifacts"][0]["act"]
    assert read["artifacts"][0]["verify"]["hashed"] == []
    assert read["report"]["ok"], read["report"]


def test_a_worker_file_missing_bad_or_extra_is_a_difference(tmp_path):
    head_state, worker, record = worker_case(tmp_path)
    os.unlink(os.path.join(worker, "config.json"))
    with open(os.path.join(worker, "model-00002-of-00002.safetensors"), "r+b") as handle:
        handle.truncate(10)
    with open(os.path.join(worker, "stray.bin"), "wb") as handle:
        handle.write(b"x")
    read = worker_read(tmp_path, head_state, worker, record)
    assert read["artifacts"][0]["act"]
    assert read["artifacts"][0]["verify"]["refetch"] == ["config.json", "model-00002-of-00002.safetensors"]
    assert read["differences"][0].startswith("target: 2 file(s), 0.00 GB, to mirror from head: ")
    assert "size 10, expected 80" in read["differences"][0]
    assert read["differences"][1] == "target: 1 file(s) that head's copy does not have, to remove: stray.bin"
    assert not read["report"]["ok"]


def test_a_worker_follows_a_head_that_stages_in_this_run(tmp_path):
    head_state, worker, record = worker_case(tmp_path)
    head_state["artifacts"][0]["act"] = True
    read = worker_read(tmp_path, head_state, worker, record)
    assert read["artifacts"][0]["act"] and read["artifacts"][0]["verify"] is None
    assert read["differences"] == ["target: head stages its copy in this run; this copy is compared with it then"]


def test_an_interrupted_mirror_to_this_worker_is_a_difference_and_one_to_another_is_not(tmp_path):
    head_state, worker, record = worker_case(tmp_path)
    mine = {"pid": 11, "cmdline": "rsync --archive --partial-dir=.cache/laguna-rsync-partial --temp-dir=x "
                                  "--files-from=- /h/ spark@10.0.0.2:%s/" % worker}
    other = {"pid": 12, "cmdline": "rsync --archive --partial-dir=.cache/laguna-rsync-partial --temp-dir=x "
                                   "--files-from=- /h/ spark@10.0.0.3:%s/" % worker}
    assert worker_read(tmp_path, head_state, worker, record, senders=[other])["differences"] == []
    receiver = ["rsync", "--server", "-logDtpre.iLsfxCIvu", "--partial-dir", ".cache/laguna-rsync-partial",
                "--temp-dir", ".cache/laguna-rsync-tmp", ".", worker + "/"]
    read = worker_read(tmp_path, head_state, worker, record, senders=[mine, other],
                       proc=fake_proc(tmp_path / "w2", receiver))
    assert read["differences"] == ["target: the mirror an interrupted run left running: senders pid 11 on head, "
                                   "receivers pid 4000 here"]


def test_a_worker_partial_left_by_rsync_is_a_difference(tmp_path):
    head_state, worker, record = worker_case(tmp_path)
    partial = os.path.join(worker, ".cache", "laguna-rsync-partial")
    os.makedirs(partial)
    with open(os.path.join(partial, "config.json"), "wb") as handle:
        handle.write(b"{")
    read = worker_read(tmp_path, head_state, worker, record)
    assert read["artifacts"][0]["act"]
    assert read["differences"] == ["target: 1 partial or stray file(s) in %s/.cache to remove: "
                                   ".cache/laguna-rsync-partial/config.json" % worker]


# --- The module --------------------------------------------------------------------


def test_the_module_keeps_the_digests_it_computed_and_changes_nothing_else(tmp_path, run_module):
    head_state, worker, record = worker_case(tmp_path)
    os.unlink(record)
    args = {"artifacts": [{"name": "target", "path": worker, "expected_shards": "2"}], "is_head": False,
            "head_artifacts": head_state["artifacts"], "head_senders": [], "head_host": "head",
            "mirror_login": "spark@10.0.0.2", "hash_cache": record}
    checked = run_module(staging_probe_module, args, check_mode=True)
    assert not checked["changed"] and not os.path.exists(record)
    assert len(checked["artifacts"][0]["verify"]["hashed"]) == 3
    first = run_module(staging_probe_module, args)
    assert not first["changed"] and len(first["artifacts"][0]["verify"]["hashed"]) == 3
    # The record held no file list: the verify task is to record it.
    assert first["differences"] == ["target: the digest record does not list head's 3 file(s) as %s's file list"
                                    % worker]
    again = run_module(staging_probe_module, args)
    assert again["artifacts"][0]["verify"]["hashed"] == []
    full = run_module(staging_probe_module, dict(args, full=True))
    assert [h["reason"] for h in full["artifacts"][0]["verify"]["hashed"]] == ["full verification requested"] * 3
    assert sorted(os.listdir(worker)) == sorted(FILES)
