"""procs: real child processes and sockets on this machine, a fake /proc for cgroups."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers.procfs import fake_proc
from ansible_collections.laguna.spark.plugins.module_utils import procs


def _spawn(*args):
    return subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)"] + list(args))


def test_matching_finds_a_real_process_by_its_command_line():
    child = _spawn("vllm", "serve", "/models/x")
    try:
        time.sleep(0.2)
        found = procs.matching(r"[v]llm serve /models/x")
        assert [p["pid"] for p in found] == [child.pid]
        assert found[0]["uid"] == os.getuid()
    finally:
        child.kill()
        child.wait()


def test_terminate_escalates_to_sigkill_for_a_process_that_ignores_sigterm():
    child = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"ready"
    killed = procs.terminate([child.pid], timeout=0.5)
    child.wait(timeout=5)
    assert killed == [child.pid] and child.returncode == -9


def test_terminate_ends_a_polite_process_without_sigkill():
    child = _spawn()
    killed = procs.terminate([child.pid], timeout=5)
    child.wait(timeout=5)
    assert killed == [] and child.returncode == -15


def test_a_real_stopped_process_is_in_state_t_and_a_running_one_is_not():
    child = _spawn()
    try:
        time.sleep(0.2)
        assert procs.state(child.pid) in ("S", "R")
        os.kill(child.pid, signal.SIGSTOP)
        for _attempt in range(50):
            if procs.state(child.pid) == "T":
                break
            time.sleep(0.05)
        assert procs.state(child.pid) == "T"
    finally:
        child.kill()
        child.wait()
    assert procs.state(child.pid) == ""


def test_stopped_names_the_units_processes_a_signal_stopped(tmp_path):
    unit = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/laguna-ray-worker.service\n"
    fake_proc(tmp_path, 20, ["/v/bin/python", "/v/bin/ray", "start", "--block"], unit, state="T")
    fake_proc(tmp_path, 21, ["/v/lib/raylet"], unit, state="T")
    fake_proc(tmp_path, 22, ["ray::IDLE"], unit, state="S")
    fake_proc(tmp_path, 23, ["gdb-traced"], unit, state="t")
    fake_proc(tmp_path, 24, ["bash"], "0::/user.slice/user-1000.slice/session-4.scope\n", state="T")
    assert procs.stopped("laguna-ray-worker", proc=str(tmp_path)) == [20, 21]
    assert procs.stopped("laguna-ray-worker.service", proc=str(tmp_path)) == [20, 21]
    assert procs.stopped("laguna-vllm", proc=str(tmp_path)) == []
    # Another user's unit of the same name is not this user's.
    assert procs.stopped("laguna-ray-worker", proc=str(tmp_path), uid=os.getuid() + 1) == []


def test_strays_are_the_matches_outside_the_unit(tmp_path):
    # cgroup v2 paths of a transient user service and of an SSH session.
    fake_proc(tmp_path, 10, ["python", "/v/bin/vllm", "serve", "/m"],
              "0::/user.slice/user-1000.slice/user@1000.service/app.slice/laguna-vllm.service\n")
    fake_proc(tmp_path, 11, ["python", "/v/bin/vllm", "serve", "/m"],
              "0::/user.slice/user-1000.slice/session-4.scope\n")
    fake_proc(tmp_path, 12, ["bash"], "0::/user.slice/user-1000.slice/session-4.scope\n")
    found = procs.matching("[v]llm serve", proc=str(tmp_path))
    assert [(p["pid"], p["unit"]) for p in found] == [(10, "laguna-vllm.service"), (11, "session-4.scope")]
    assert [p["pid"] for p in procs.strays(found, "laguna-vllm")] == [11]
    assert [p["pid"] for p in procs.strays(found, "laguna-vllm.service")] == [11]


def test_listeners_names_the_process_holding_a_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        found = procs.listeners(port)
        assert [f["pid"] for f in found] == [os.getpid()]
        assert found[0]["address"] == "0100007F"  # 127.0.0.1 as /proc/net/tcp prints it
    finally:
        sock.close()
    assert procs.listeners(port) == []


def test_a_listener_this_user_cannot_read_is_reported_by_its_uid(tmp_path):
    """A socket in /proc/net/tcp whose process is not readable (another
    user's, read without root) is still a holder: never a free port."""
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n")
    found = procs.listeners(8000, proc=str(tmp_path))
    assert found == [{"pid": None, "cmdline": "", "unit": "", "address": "00000000", "uid": 0, "hidden": True}]
    held = procs.port_holders(8000, "laguna-vllm.service", proc=str(tmp_path))
    assert held["foreign"] == found
    assert held["message"].startswith("Port 8000 is held by a process of uid 0 that uid %d cannot read" % os.getuid())
    assert procs.port_holders(8001, "laguna-vllm.service", proc=str(tmp_path))["foreign"] == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to drop to another user")
def test_a_root_listener_read_as_another_user_is_still_foreign():
    """For real: root holds the port, a child of another uid reads /proc."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        sock.close()  # the parent alone holds the port
        try:
            os.setgid(65534)
            os.setuid(65534)
            held = procs.port_holders(port, "laguna-vllm.service")
            os.write(write, json.dumps(held).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as handle:
            held = json.loads(handle.read() or "{}")
        os.waitpid(child, 0)
        # root reads the same socket's process, and names it
        assert [f["pid"] for f in procs.port_holders(port, "laguna-vllm.service")["foreign"]] == [os.getpid()]
    finally:
        sock.close()
    assert [(f["pid"], f["uid"], f.get("hidden")) for f in held["foreign"]] == [(None, 0, True)], held
    assert "a process of uid 0 that uid 65534 cannot read" in held["message"], held


def test_terminate_ends_a_stopped_process_with_sigterm():
    # A Ctrl-Z'd or SIGSTOPped orphan gets SIGTERM only once it runs again:
    # terminate() continues it, so it ends without waiting for SIGKILL.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        killed = procs.terminate([sleeper.pid], timeout=5, alive=lambda pid: sleeper.poll() is None)
        assert killed == [] and sleeper.returncode == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
