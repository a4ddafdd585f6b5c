"""PENDING fault tests for issue 21, item 4 (bullets 1, 3 and 4), written but
NEVER RUN (the helper that wrote them may not run molecule).

They belong in molecule/default/faults/test_faults.py (the fault suite that
side_effect.yml runs), before test_a_full_rerun_changes_nothing_and_no_model_byte_was_lost;
move them there and delete this file. Here, in the testinfra directory that
`molecule verify` collects, they are skipped unless LAGUNA_PENDING_FAULTS=1,
so that verify never runs them on the converged cluster by accident.

Each leaves the cluster as it found it (healthy, every model byte as before).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not os.environ.get("LAGUNA_PENDING_FAULTS"),
                                reason="pending (issue 21): move into molecule/default/faults/test_faults.py")


def suite():
    """The fault suite's helpers (podman, play, healthy, ...), imported only when these tests run."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "faults"))
    import test_faults  # pylint: disable=import-outside-toplevel,import-error
    return test_faults


TARGET = "/home/spark/models/hf/Laguna-S-2.1-FP8"


def shard(i):
    return "model-%05d-of-00024.safetensors" % i


def mirror_pids(f, host):
    """PIDs of the mirror's rsync processes on ``host`` (senders on the head, receivers on a worker)."""
    out = f.podman(host, "pgrep", "-f", "^rsync .*--partial-dir=.cache/laguna-rsync-partial", check=False)
    return sorted(int(p) for p in out.split())


def test_ctrl_c_over_ssh_mid_mirror_is_stopped_by_the_rerun_before_it_verifies_or_sends():
    """Bullet 1: SIGINT (twice) to ansible-playbook, over SSH, while the mirror's rsync streams send.
    The async mirror goes on sending; the rerun stops it first and ends with identical copies."""
    f = suite()
    before = f.model_digests()
    f.podman(f.WORKER, "bash", "-c", "rm -f %s/model-0001[0-5]-of-00024.safetensors" % TARGET, user=f.USER)
    kept = {name: f.podman(f.WORKER, "stat", "-c", "%i", "%s/%s" % (TARGET, name))
            for name in (shard(1), shard(2), shard(20))}
    log = open("/tmp/laguna-pending-ctrlc.log", "w")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", f.INVENTORY,
            os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "site.yml"), "--tags", "staging",
            "-e", '{"staging_rsync_options": ["--archive", "--bwlimit=16"], "staging_mirror_streams": 2}']
    run = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _attempt in range(3000):
            if mirror_pids(f, f.HEAD):
                break
            assert run.poll() is None, open("/tmp/laguna-pending-ctrlc.log").read()[-3000:]
            time.sleep(0.2)
        time.sleep(3)
        run.send_signal(signal.SIGINT)
        time.sleep(1)
        run.send_signal(signal.SIGINT)
        assert run.wait(120) != 0
    finally:
        if run.poll() is None:
            run.kill()
    senders, receivers = mirror_pids(f, f.HEAD), mirror_pids(f, f.WORKER)
    assert senders and receivers, "the interrupted mirror should still send (async), or this test tests nothing"

    rc, changed, out, _seconds = f.play("--tags", "staging")
    assert rc == 0, out[-3000:]
    said = "laguna-worker: target: stopped the mirror an interrupted run left running: senders pid %s on laguna-head" \
        % ", ".join(str(p) for p in senders)
    assert said in out, out[-3000:]
    assert out.index(said) < out.index("TASK [laguna.spark.staging : Verify against the head's sha256s the worker's target]")
    assert changed[f.WORKER] >= 1
    for host in (f.HEAD, f.WORKER):
        assert not f.podman(host, "pgrep", "-af", "[r]sync |[s]sh -c aes128-gcm", check=False), host
    assert f.podman(f.WORKER, "bash", "-c", "find %s -path '*/.cache/laguna-rsync-*' -type f" % TARGET) == ""
    assert f.model_digests() == before
    for name, inode in kept.items():  # complete before: never sent again
        assert f.podman(f.WORKER, "stat", "-c", "%i", "%s/%s" % (TARGET, name)) == inode, name
    rc, changed, out, _seconds = f.play("--tags", "staging")
    assert rc == 0 and changed == {f.HEAD: 0, f.WORKER: 0}, out[-3000:]


def test_a_file_the_hubs_list_does_not_name_is_named_and_refused_only_when_vllm_would_read_it():
    """Bullet 3: a note in the head's checkpoint is named and left alone (staging and verify pass, the
    worker never gets it); a stray shard copy is refused with its path before anything is mirrored."""
    f = suite()
    before = f.model_digests()
    vllm = f.vllm_pid()
    f.podman(f.HEAD, "bash", "-c", "echo 'my notes' > %s/notes.txt" % TARGET, user=f.USER)
    try:
        rc, _changed, out, _seconds = f.play("--tags", "staging")
        assert rc == 0, out[-3000:]
        assert ("1 file(s) that the checkpoint's file list does not name, left alone (neither compared nor "
                "mirrored): notes.txt") in out, out[-3000:]
        assert "1 file(s) outside its file list, left alone: notes.txt" in out
        assert "differs from laguna-head's copy" not in out
        assert subprocess.run(["podman", "exec", f.WORKER, "test", "-e", TARGET + "/notes.txt"], check=False).returncode == 1
        rc, changed, out, _seconds = f.play("--tags", "staging")
        assert rc == 0 and changed == {f.HEAD: 0, f.WORKER: 0}, out[-3000:]
        rc, _changed, out, _seconds = f.play(playbook="laguna.spark.verify")
        assert rc == 0 and "differs from" not in out, out[-3000:]

        f.podman(f.HEAD, "cp", "-p", "%s/%s" % (TARGET, shard(1)), "%s/model-00025-of-00024.safetensors" % TARGET,
                 user=f.USER)
        rc, _changed, out, _seconds = f.play("--tags", "staging")
        assert rc != 0
        assert ("1 file(s) that the checkpoint's file list does not name would be read as part of the model: "
                "model-00025-of-00024.safetensors (a shard's name); move them out from %s (or delete them), "
                "then rerun; nothing was mirrored" % TARGET) in out, out[-3000:]
        assert subprocess.run(["podman", "exec", f.WORKER, "test", "-e",
                               TARGET + "/model-00025-of-00024.safetensors"], check=False).returncode == 1
        rc, _changed, out, _seconds = f.play(playbook="laguna.spark.verify")
        assert rc != 0 and "model-00025-of-00024.safetensors (a shard's name)" in out, out[-3000:]
        assert f.vllm_pid() == vllm
    finally:
        f.podman(f.HEAD, "rm", "-f", TARGET + "/notes.txt", TARGET + "/model-00025-of-00024.safetensors")
    rc, changed, out, _seconds = f.play("--tags", "staging")
    assert rc == 0 and changed == {f.HEAD: 0, f.WORKER: 0}, out[-3000:]
    assert f.model_digests() == before and f.healthy()


def test_a_worker_without_a_roce_v2_gid_stops_the_head_in_one_sentence_naming_it():
    """Bullet 4: the worker's address has no RoCE v2 GID any more (every slot of it typed RoCE v1); a
    complete run fails on the worker in its fabric discovery, and the head stops in network_gate with
    one sentence naming the worker, never an internal error; nothing restarts."""
    f = suite()
    vllm = f.vllm_pid()
    slots = f.podman(f.WORKER, "bash", "-c", "grep -l ffff:0a59:4d0c %s/gids/*" % f.GIDS).split()
    types = {os.path.basename(g): f.podman(f.WORKER, "cat", "%s/gid_attrs/types/%s" % (f.GIDS, os.path.basename(g)))
             for g in slots}
    assert "RoCE v2" in types.values()
    f.podman(f.WORKER, "bash", "-c", "for i in %s; do echo 'IB/RoCE v1' > %s/gid_attrs/types/$i; done"
             % (" ".join(types), f.GIDS))
    try:
        rc, _changed, out, seconds = f.play()
        assert rc != 0
        assert "No GID policy" in out and "laguna-worker" in out, out[-3000:]
        assert ("laguna-worker failed earlier in this run (its error is above), so network_gate on laguna-head "
                "stops here (it needs laguna-worker's fabric_facts): fix what failed on laguna-worker and rerun."
                ) in out, out[-3000:]
        assert "list index out of range" not in out and "HostVarsVars" not in out
        assert f.vllm_pid() == vllm and seconds < 300
    finally:
        f.podman(f.WORKER, "bash", "-c", "; ".join("echo '%s' > %s/gid_attrs/types/%s" % (t, f.GIDS, i)
                                                   for i, t in types.items()))
    rc, _changed, out, _seconds = f.play()
    assert rc == 0 and f.healthy(), out[-3000:]
    assert f.vllm_pid() == vllm
