"""The staging role as users run it: the real `hf` CLI (the pinned huggingface_hub)
against a local Hub double, checksums not sizes, resume after kills, parallel
mirroring to a "worker" reached through a private sshd on 127.0.0.2."""
import getpass
import json
import os
import re
import sys
import threading
import time

import pytest
from helpers import interrupt, role_events

from staging_env import (DRAFT, SHARD_BYTES, TARGET, HubDouble, kill_when, leftovers, pids, run_play, sha256,
                         staging_vars)
# pytest fixtures, used by name as test arguments
from staging_env import hf_bin, hub, sshd  # noqa: F401  # pylint: disable=unused-import

SHARD5 = "model-00005-of-00024.safetensors"
# Head-only fault tests stage the target alone (the draft takes the same path, and time).
TARGET_ONLY = {"staging_artifacts": [{"name": "target", "repo": TARGET, "path": "{{ laguna_model_path }}",
                                      "expected_shards": 24}]}
SHARD9 = "model-00009-of-00024.safetensors"


def shard_sums(tree):
    return {p.name: sha256(p) for p in sorted(tree.iterdir()) if p.is_file()}


def run_in_thread(fn, *args, **kwargs):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", fn(*args, **kwargs)), daemon=True)
    thread.start()
    return thread, box


# --- Download on the head -------------------------------------------------------


def test_downloads_once_verifies_by_sha256_and_never_again(runner, hub, hf_bin, tmp_path):
    values = staging_vars(tmp_path, hub, hf_bin)
    first = runner.include_role("staging", values)
    assert first.rc == 0, first.text
    target, draft = tmp_path / "models" / "target", tmp_path / "models" / "draft"
    # Every file has the sha256 the Hub publishes; nothing partial or stray is left.
    assert shard_sums(target) == hub.published(TARGET)
    assert shard_sums(draft) == hub.published(DRAFT)
    assert leftovers(target) == [] and leftovers(draft) == []
    assert "hashed 28 file(s)" in first.flat and "not hashed before" in first.flat
    assert "target: 24 shard(s)" in first.flat and "draft: 1 shard(s)" in first.flat
    # Progress: a final line per download with GB, seconds and GB/s.
    assert re.search(r"download target: 0\.03 of 0\.03 GB \(100\.0%\), [\d.]+ GB/s, \d+ s, finished", first.flat)
    gets = [r for r in hub.requests() if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert len(gets) == 28 + 4  # 24 shards, index, config, 2 tokenizer files; the draft: shard + 3 files

    second = runner.include_role("staging", values)
    assert second.rc == 0, second.text
    assert second.stats["changed"].get("localhost", 0) == 0
    assert "hashed nothing: 28 file(s) unchanged" in second.flat
    assert len([r for r in hub.requests() if r["method"] == "GET" and "/resolve/" in r["path"]]) == len(gets)
    # On checkpoints as wanted, the probe is the one task of the role that reaches the node.
    assert role_events.node_tasks(list(second.events), "staging") == ["laguna.spark.staging_probe"], second.text


def test_head_corruption_is_found_and_downloaded_again(runner, hub, hf_bin, tmp_path):
    values = staging_vars(tmp_path, hub, hf_bin, **TARGET_ONLY)
    assert runner.include_role("staging", values).rc == 0
    target = tmp_path / "models" / "target"
    # Same size, same mtime: only the checksum (and the record's ctime) can tell.
    shard = target / SHARD5
    stat = shard.stat()
    with open(shard, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\xff" * 16)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with open(target / SHARD9, "r+b") as handle:
        handle.truncate(100)
    (target / "notes.txt").write_text("the user's own file")

    again = runner.include_role("staging", values)
    assert again.rc == 0, again.text
    assert "sha256" in again.flat and SHARD5 in again.flat and "size 100, expected %d" % SHARD_BYTES in again.flat
    assert "hashed 2 file(s)" in again.flat and "changed since last hashed" in again.flat
    assert shard_sums(target)[SHARD5] == hub.published()[SHARD5]
    assert shard_sums(target)[SHARD9] == hub.published()[SHARD9]
    assert len(hub.downloads(SHARD5)) == 2 and len(hub.downloads(SHARD9)) == 2
    assert len(hub.downloads("model-00001-of-00024.safetensors")) == 1
    assert (target / "notes.txt").exists()  # the head's extra files are not the role's to remove


def test_a_download_killed_mid_shard_resumes_without_fetching_complete_files_again(runner, hub, hf_bin, tmp_path):
    hub.set_rate(SHARD_BYTES)  # one second per shard and connection
    values = staging_vars(tmp_path, hub, hf_bin, **TARGET_ONLY)
    target = tmp_path / "models" / "target"

    def shards():
        return len(list(target.glob("model-*.safetensors"))) if target.exists() else 0

    thread, box = run_in_thread(runner.include_role, "staging", values)
    killed = kill_when(["hf", "download", str(target)], lambda: shards() >= 8)
    thread.join(120)
    first = box["result"]
    assert killed and first.rc != 0
    assert "Rerun to resume" in first.flat
    # What the real CLI leaves behind when SIGKILLed: process-unique partial files it never reuses.
    assert list(target.glob(".cache/huggingface/download/*.incomplete"))
    done_before = {p.name for p in target.glob("model-*.safetensors")}

    hub.set_rate(0)
    again = runner.include_role("staging", values)
    assert again.rc == 0, again.text
    assert shard_sums(target) == hub.published()
    assert leftovers(target) == []
    assert not pids(["hf", "download", str(target)])
    for name in done_before:  # complete before the kill: never transferred again
        assert len(hub.downloads(name)) == 1, name
    assert "removed .cache/huggingface/download/" in again.flat


def test_a_timed_out_download_and_a_ctrl_c_orphan_are_stopped_and_resumed(runner, hub, hf_bin, tmp_path):
    hub.set_rate(SHARD_BYTES // 8)
    target = tmp_path / "models" / "target"
    first = runner.include_role("staging", staging_vars(tmp_path, hub, hf_bin, staging_download_timeout=3,
                                                        **TARGET_ONLY))
    assert first.rc != 0
    assert "hf download %s" % TARGET in first.flat and "Rerun to resume" in first.flat
    time.sleep(1)
    for _attempt in range(50):  # the timeout's kill (or the role's stop) leaves no hf behind
        if not pids(["hf", "download", str(target)]):
            break
        time.sleep(0.2)
    assert not pids(["hf", "download", str(target)])

    # Ctrl-C of the playbook (SIGINT, twice) leaves its async download
    # running: the rerun stops it first, then resumes.
    values = staging_vars(tmp_path, hub, hf_bin, **TARGET_ONLY)
    download = ["hf", "download", str(target)]
    interrupt.interrupted_role(tmp_path, "staging", dict(values, laguna_user=getpass.getuser(),
                                                         laguna_sysfs_infiniband=runner.sysfs,
                                                         fabric_sysfs_net=runner.sysfs_net),
                               lambda: pids(download))
    orphans = pids(download)
    assert orphans, "the interrupted download should still run (async), or this test tests nothing"
    # Full speed again as soon as the role has stopped the orphan (not before, or it would finish first).
    threading.Thread(target=lambda: (_wait_gone(orphans), hub.set_rate(0)), daemon=True).start()
    again = runner.include_role("staging", values)
    assert again.rc == 0, again.text
    assert "stopped a download left running (pid %d)" % orphans[0] in again.flat, again.flat[-3000:]
    assert shard_sums(target) == hub.published() and leftovers(target) == []
    assert not pids(download)


def _wait_gone(pid_list, timeout=300):
    deadline = time.time() + timeout
    while any(os.path.exists("/proc/%d" % pid) for pid in pid_list) and time.time() < deadline:
        time.sleep(0.1)


def test_a_checkpoint_with_the_wrong_shard_count_fails(runner, hf_bin, tmp_path):
    double = HubDouble(tmp_path, target_shards=23).start()
    try:
        result = runner.include_role("staging", staging_vars(tmp_path, double, hf_bin, **TARGET_ONLY))
    finally:
        double.stop()
    assert result.rc != 0
    assert "23 of 24 shards" in result.flat


def test_check_mode_downloads_nothing(runner, hub, hf_bin, tmp_path):
    result = runner.include_role("staging", staging_vars(tmp_path, hub, hf_bin, **TARGET_ONLY), cmdline="--check")
    assert result.rc == 0, result.text
    assert result.stats["changed"]["localhost"] >= 2
    assert "would download 28 file(s)" in result.flat and "missing" in result.flat
    assert not (tmp_path / "models").exists()
    assert not [r for r in hub.requests() if "/resolve/" in r["path"]]


# --- A full disk ------------------------------------------------------------------------


def _tmpfs(mount):
    """A tmpfs at ``mount`` of a given size in MiB (a real full disk); resize() grows it in place."""
    import subprocess
    mount.mkdir()

    def resize(mib, remount=True):
        options = ("remount,size=%dm" if remount else "size=%dm") % mib
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True, timeout=30)
    resize.mount = mount
    try:
        yield resize
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


@pytest.fixture
def small_disk(tmp_path):
    """tmp_path/models (the head's trees) on a tmpfs."""
    yield from _tmpfs(tmp_path / "models")


@pytest.fixture
def small_worker_disk(tmp_path):
    """tmp_path/worker-models (the worker's trees in two_nodes) on a tmpfs."""
    yield from _tmpfs(tmp_path / "worker-models")


def fill_when(done, filler, mib=64, timeout=120):
    """A thread that, once done() is true, writes up to ``mib`` MiB into filler (another writer takes the disk)."""
    def fill():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done():
            time.sleep(0.05)
        with open(filler, "wb") as handle:
            try:
                for _block in range(mib):
                    handle.write(b"\0" * (1 << 20))
                    handle.flush()
            except OSError:
                pass
    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    return thread


def test_a_download_that_cannot_fit_fails_before_it_starts(runner, hub, hf_bin, small_disk, tmp_path):
    small_disk(8, remount=False)  # the target is 24 shards of 1 MiB
    values = staging_vars(tmp_path, hub, hf_bin, staging_space_reserve_gb=0, **TARGET_ONLY)
    first = runner.include_role("staging", values)
    assert first.rc != 0
    assert re.search(r"28 file\(s\) to fetch into %s need 0\.03 GB, and 0\.01 GB is free on its filesystem: "
                     r"free 0\.0\d GB there \(or point the path at a larger disk\), then rerun; nothing was fetched"
                     % re.escape(values["laguna_model_path"]), first.flat), first.flat[-2000:]
    assert not [r for r in hub.requests() if "/resolve/" in r["path"]]

    small_disk(64)
    again = runner.include_role("staging", values)
    assert again.rc == 0, again.text
    assert shard_sums(small_disk.mount / "target") == hub.published()


def test_a_disk_that_fills_up_during_the_download_fails_then_resumes(runner, hub, hf_bin, small_disk, tmp_path):
    small_disk(40, remount=False)
    hub.set_rate(SHARD_BYTES)  # one second per shard and connection: three waves of eight
    values = staging_vars(tmp_path, hub, hf_bin, staging_space_reserve_gb=0, **TARGET_ONLY)
    target = small_disk.mount / "target"
    filler = small_disk.mount / "someone-elses-file"
    filling = fill_when(lambda: target.exists() and len(list(target.glob("model-*.safetensors"))) >= 8, filler,
                        timeout=60)
    first = runner.include_role("staging", values)
    filling.join(60)
    assert first.rc != 0
    assert "filled up during the download: free space there" in first.flat, first.flat[-2000:]
    assert "Rerun to resume" in first.flat
    assert not pids(["hf", "download", str(target)])
    done_before = {p.name for p in target.glob("model-*.safetensors")}
    assert 8 <= len(done_before) < 24

    filler.unlink()
    hub.set_rate(0)
    again = runner.include_role("staging", values)
    assert again.rc == 0, again.text
    assert shard_sums(target) == hub.published() and leftovers(target) == []
    for name in done_before:  # verified before the disk filled: never fetched again
        assert len(hub.downloads(name)) == 1, name


# --- Mirror to a worker -------------------------------------------------------------


def two_nodes(runner, tmp_path, sshd, hub, hf_bin, **more):
    """A head and a worker on this machine: the worker's trees are elsewhere, reached over sshd."""
    head_models, worker_models = tmp_path / "models", tmp_path / "worker-models"
    values = staging_vars(tmp_path, hub, hf_bin, **more)
    values["staging_artifacts"] = [
        {"name": "target", "repo": TARGET, "path": "{{ node_tree }}/target", "expected_shards": 24,
         "source_path": str(head_models / "target")},
        {"name": "draft", "repo": DRAFT, "path": "{{ node_tree }}/draft", "expected_shards": None,
         "source_path": str(head_models / "draft"), "fix_ignore": "{{ fix_ignore | default(false) }}"}]
    values["staging_hash_cache"] = "{{ node_cache }}/sha256.json"
    values["staging_ssh_options"] = ["-T", "-x", "-o", "Compression=no"] + sshd.options()
    inventory = (
        "[spark_head]\nlocalhost ansible_connection=local laguna_roce_ip=127.0.0.1 ansible_python_interpreter={py} "
        "node_tree={head} node_cache={tmp}/head-cache\n"
        "[spark_workers]\nworker ansible_connection=local laguna_roce_ip=127.0.0.2 ansible_python_interpreter={py} "
        "node_tree={worker} node_cache={tmp}/worker-cache\n").format(
            py=sys.executable, head=head_models, worker=worker_models, tmp=tmp_path)

    def run(cmdline=None, **extra):
        return run_play(runner, "    - ansible.builtin.include_role:\n        name: laguna.spark.staging\n",
                        dict(values, **extra), inventory, cmdline=cmdline)
    run.values, run.inventory = values, inventory
    return run, head_models / "target", worker_models / "target"


def test_mirrors_in_parallel_by_checksum_then_never_again(runner, hub, hf_bin, sshd, tmp_path):
    # The worker's trees are at another path than the head's (as a path set in
    # host_vars would be): the nodes must still stage each checkpoint in step.
    # The draft's ignore list is rewritten on the head (staging_fix_draft_ignore)
    # before it is mirrored, and still verifies against the Hub.
    run, head, worker = two_nodes(runner, tmp_path, sshd, hub, hf_bin, staging_mirror_streams=4, fix_ignore=True)
    first = run()
    assert first.rc == 0, first.text
    assert shard_sums(worker) == hub.published() == shard_sums(head)
    assert leftovers(worker) == [] and not (worker / ".cache").exists()
    assert re.search(r"mirrored 0\.03 GB in [\d.]+ s, [\d.]+ GB/s, 4 stream\(s\)", first.flat)
    assert re.search(r"worker: mirror target: [\d.]+ of 0\.03 GB", first.flat)
    assert not pids(["rsync", str(worker)]) and not pids(["ssh", "-p", str(sshd.port)])
    assert "localhost: draft: ignore entries rewritten" in first.flat
    head_draft, worker_draft = head.parent / "draft" / "config.json", worker.parent / "draft" / "config.json"
    ignore = json.loads(worker_draft.read_text())["quantization_config"]["ignore"]
    assert ignore == ["re:.*\\.self_attn\\.g_proj$", "re:.*\\.self_attn\\.qkv_proj$"]
    assert worker_draft.read_bytes() == head_draft.read_bytes()

    second = run()
    assert second.rc == 0, second.text
    assert second.stats["changed"].get("worker", 0) == 0 and second.stats["changed"].get("localhost", 0) == 0
    assert "worker: target: hashed nothing" in second.flat and "mirrored 0." not in second.flat
    assert "localhost: draft: hashed nothing" in second.flat and "worker: draft: hashed nothing" in second.flat
    assert len(hub.downloads("config.json")) == 2  # once per repo, never again
    # One read per node: the head's probe (which asks the Hub), the worker's probe.
    events = list(second.events)
    for host in ("localhost", "worker"):
        assert role_events.node_tasks(events, "staging", host) == ["laguna.spark.staging_probe"], (host, second.text)

    # The worker alone (--limit): the head's read is made for it, delegated, once; nothing else reaches a node.
    alone = run(cmdline="--limit worker")
    assert alone.rc == 0, alone.text
    assert alone.stats["changed"].get("worker", 0) == 0
    assert "worker: target: hashed nothing" in alone.flat and "worker: draft: hashed nothing" in alone.flat
    assert role_events.node_tasks(list(alone.events), "staging", "worker") == ["laguna.spark.staging_probe"] * 2, \
        alone.text


def test_damage_is_repaired_from_a_good_copy_and_never_spread(runner, hub, hf_bin, sshd, tmp_path):
    run, head, worker = two_nodes(runner, tmp_path, sshd, hub, hf_bin)
    first = run()
    assert first.rc == 0, first.text
    shard = worker / SHARD5
    stat = shard.stat()
    with open(shard, "r+b") as handle:
        handle.write(b"\0" * 64)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with open(worker / SHARD9, "r+b") as handle:
        handle.truncate(10)
    (worker / "stray.bin").write_bytes(b"x")
    # A note in the head's checkpoint that the Hub's file list does not name:
    # named, never compared or mirrored, and no reason to fail.
    (head / "notes.txt").write_text("the user's own note")
    head_before = shard_sums(head)

    again = run()
    assert again.rc == 0, again.text
    assert shard_sums(worker) == hub.published() and not (worker / "stray.bin").exists()
    assert (head / "notes.txt").exists() and not (worker / "notes.txt").exists()
    assert "1 file(s) that the checkpoint's file list does not name, left alone (neither compared nor mirrored): " \
           "notes.txt" in again.flat
    assert "target: 24 shard(s), 0.03 GB; 1 file(s) outside its file list, left alone: notes.txt" in again.flat
    assert "differs from" not in again.flat, again.flat[again.flat.index("differs from") - 3000:][:4000]
    assert shard_sums(head) == head_before  # the head was never written to
    assert "2 stream(s)" in again.flat and "sent %s, %s" % (SHARD5, SHARD9) in again.flat
    removed = re.search(r"worker: target: .*?; removed ([^\"]*)", again.flat).group(1)
    assert SHARD5 in removed and SHARD9 in removed and "stray.bin" in removed

    # A damaged head copy is downloaded again, never mirrored.
    with open(head / SHARD5, "r+b") as handle:
        handle.write(b"\0" * 64)
    (worker / SHARD5).unlink()
    third = run()
    assert third.rc == 0, third.text
    assert len(hub.downloads(SHARD5)) == 2
    assert sha256(worker / SHARD5) == hub.published()[SHARD5] == sha256(head / SHARD5)

    # A stray shard copy in the head's checkpoint would be read as part of the
    # model: refused, naming it, before anything is mirrored.
    (head / "model-00025-of-00024.safetensors").write_bytes(b"x")
    (worker / SHARD9).unlink()
    fourth = run()
    assert fourth.rc != 0
    assert ("1 file(s) that the checkpoint's file list does not name would be read as part of the model: "
            "model-00025-of-00024.safetensors (a shard's name); move them out from %s (or delete them), then rerun; "
            "nothing was mirrored" % head) in fourth.flat, fourth.flat[-3000:]
    assert not (worker / SHARD9).exists() and not (worker / "model-00025-of-00024.safetensors").exists()


def mirror_streams(worker):
    """(senders, receivers): PIDs of the rsync processes of mirror streams into ``worker``."""
    senders, receivers = [], []
    for pid in pids(["rsync", "--partial-dir", str(worker)]):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"rsync":
            (receivers if b"--server" in argv else senders).append(pid)
    return senders, receivers


def test_a_mirror_killed_mid_shard_or_left_running_by_ctrl_c_resumes(runner, hub, hf_bin, sshd, tmp_path):
    run, head, worker = two_nodes(runner, tmp_path, sshd, hub, hf_bin, staging_mirror_streams=2,
                                  staging_rsync_options=["--archive", "--bwlimit=4096"])
    thread, box = run_in_thread(run)

    def complete():
        return worker.exists() and len(list(worker.glob("model-*.safetensors"))) >= 4

    # The head downloads first: under load that alone can take over a minute.
    killed = kill_when(["rsync", "--partial-dir", str(worker)], complete, timeout=300)
    thread.join(120)
    assert killed and box["result"].rc != 0
    time.sleep(1)
    done_before = {p.name: p.stat().st_ino for p in worker.glob("model-*.safetensors")}

    # Ctrl-C of ansible-playbook (SIGINT, twice) mid-rsync: its async mirror
    # goes on sending (slowly here, so that it still runs when the rerun
    # starts); the rerun must stop it, on the head and on the worker, before
    # it verifies or sends anything.
    interrupt.interrupted_play(
        tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: laguna.spark.staging\n",
        dict(run.values, staging_rsync_options=["--archive", "--bwlimit=32"]),
        lambda: mirror_streams(worker)[0], timeout=300, inventory=run.inventory, what="the mirror")
    senders, receivers = mirror_streams(worker)
    assert senders and receivers, "the interrupted mirror should still run (async), or this test tests nothing"

    again = run(staging_rsync_options=["--archive"])
    assert again.rc == 0, again.text
    stopped = re.search(r"worker: target: stopped the mirror an interrupted run left running: "
                        r"senders pid ([\d, ]+) on localhost, receivers pid ([\d, ]+|none) here", again.flat)
    assert stopped, again.flat[-3000:]
    assert sorted(int(p) for p in stopped.group(1).split(", ")) == sorted(senders)
    # Stopped before the worker's copy was verified, and before anything was sent.
    assert again.text.index("stopped the mirror an interrupted run left running") < again.text.index(
        "TASK [laguna.spark.staging : Verify against the head's sha256s the worker's target]")
    assert shard_sums(worker) == hub.published() == shard_sums(head) and leftovers(worker) == []
    assert mirror_streams(worker) == ([], []) and not pids(["ssh", "-p", str(sshd.port)])
    for name, inode in done_before.items():  # complete before the kill: not sent again
        assert (worker / name).stat().st_ino == inode, name


def test_a_worker_disk_that_fills_up_during_the_mirror_fails_then_resumes(runner, hub, hf_bin, sshd,
                                                                          small_worker_disk, tmp_path):
    small_worker_disk(40, remount=False)  # the target is 24 shards of 1 MiB
    run, _head, worker = two_nodes(runner, tmp_path, sshd, hub, hf_bin, staging_mirror_streams=2,
                                   staging_space_reserve_gb=0,
                                   staging_rsync_options=["--archive", "--bwlimit=1024"])
    filler = small_worker_disk.mount / "someone-elses-file"
    filling = fill_when(lambda: worker.exists() and len(list(worker.glob("model-*.safetensors"))) >= 6, filler,
                        timeout=300)
    first = run()
    filling.join(60)
    assert first.rc != 0
    assert "on worker filled up: free space there. Rerun to resume" in first.flat, first.flat[-3000:]
    assert not pids(["rsync", str(worker)]) and not pids(["ssh", "-p", str(sshd.port)])
    done_before = {p.name: p.stat().st_ino for p in worker.glob("model-*.safetensors")}
    assert 6 <= len(done_before) < 24

    filler.unlink()
    again = run(staging_rsync_options=["--archive"])
    assert again.rc == 0, again.text
    assert shard_sums(worker) == hub.published() and leftovers(worker) == []
    for name, inode in done_before.items():  # complete before the disk filled: not sent again
        assert (worker / name).stat().st_ino == inode, name


# --- Page cache (preflight) ------------------------------------------------------------


def test_preflight_drops_the_page_cache_of_the_model_trees(runner, tmp_path):
    from ansible_collections.laguna.spark.plugins.module_utils import page_cache
    models = tmp_path / "models"
    (models / "target").mkdir(parents=True)
    (models / "draft").mkdir()
    shard = models / "target" / "model-00001-of-00024.safetensors"
    shard.write_bytes(os.urandom(4 << 20))
    shard.read_bytes()
    assert page_cache.cached_bytes(str(shard)) == 4 << 20
    values = {"laguna_model_path": str(models / "target"), "laguna_draft_path": str(models / "draft")}
    checked = runner.include_role("preflight", values, cmdline="--check", tasks_from="page_cache")
    assert checked.rc == 0, checked.text
    assert "would drop 0.00 GB of page cache over 2 tree(s)" in checked.flat
    assert page_cache.cached_bytes(str(shard)) == 4 << 20
    dropped = runner.include_role("preflight", values, tasks_from="page_cache")
    assert dropped.rc == 0, dropped.text
    assert "dropped 0.00 GB of page cache over 2 tree(s)" in dropped.flat
    assert dropped.stats["changed"].get("localhost", 0) == 0
    assert page_cache.cached_bytes(str(shard)) < (1 << 20)
