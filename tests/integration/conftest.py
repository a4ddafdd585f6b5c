"""Run the collection's roles on localhost through ansible-runner."""
import getpass
import os
import select
import subprocess
import sys
import time
import urllib.request

import ansible_runner
import pytest

from helpers import DOUBLES, ROOT, free_port  # noqa: F401  (re-exported for `from conftest import ...`)
from helpers import standin
from helpers.constants import MAX_MODEL_LEN, SERVED_MODEL
from helpers.collection import collections_path
from helpers.sysfs import spark

# The installed copy of the collection: imported here, and run by ansible-runner.
COLLECTIONS = collections_path()
# Older tests import these from here; new ones import them from helpers.
__all__ = ["COLLECTIONS", "DOUBLES", "ROOT", "free_port"]

# ansible-runner looks for ansible-playbook on PATH: use the one beside this Python.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


class Runner:
    """Each run gets a private data dir of its own (ansible-runner keeps a
    run's --cmdline there and would apply it to the next one)."""

    def __init__(self, tmp_path):
        self.base = tmp_path
        self.runs = 0
        # A Spark's RDMA side: the cabled port's two PCIe twins, 127.0.0.1 on
        # the first (its RoCE v2 GID at index 3), 127.0.1.1 on the second.
        self.sysfs, self.sysfs_net = spark(tmp_path / "sys", address="127.0.0.1", twin1_address="127.0.1.1")

    def run(self, tasks_yaml, extravars=None, cmdline=None):
        self.runs += 1
        data = self.base / ("runner-%d" % self.runs)
        (data / "project").mkdir(parents=True)
        (data / "inventory").mkdir()
        (data / "inventory" / "hosts").write_text(
            "[spark_head]\nlocalhost ansible_connection=local laguna_roce_ip=127.0.0.1 "
            "ansible_python_interpreter=%s\n" % sys.executable)
        (data / "project" / "play.yml").write_text(
            "- hosts: spark_head\n  gather_facts: false\n  tasks:\n" + tasks_yaml)
        extravars = dict({"laguna_user": getpass.getuser(), "laguna_sysfs_infiniband": self.sysfs,
                          "fabric_sysfs_net": self.sysfs_net}, **(extravars or {}))
        result = ansible_runner.run(
            private_data_dir=str(data), playbook="play.yml", extravars=extravars,
            cmdline=cmdline, quiet=True,
            envvars={"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
                     "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DIFF_ALWAYS": "0"})
        result.text = result.stdout.read()
        result.flat = " ".join(result.text.split())  # messages wrap across lines
        return result

    def include_role(self, name, extravars=None, cmdline=None, tasks_from=None):
        """Run one role of the collection (or one of its task files) on localhost."""
        tasks = "    - ansible.builtin.include_role:\n        name: laguna.spark.%s\n" % name
        if tasks_from:
            tasks += "        tasks_from: %s\n" % tasks_from
        return self.run(tasks, extravars, cmdline)


@pytest.fixture
def runner(tmp_path):
    return Runner(tmp_path)


def _wait_for_line(proc, line, timeout):
    """(True, text) once proc's stderr has a line ending in ``line``; (False, text) at its end or
    the timeout. Reads the pipe unbuffered, so nothing read stays hidden in a buffer."""
    deadline, text, fd = time.monotonic() + timeout, b"", proc.stderr.fileno()
    while True:
        if any(seen.rstrip().endswith(line.encode()) for seen in text.split(b"\n")[:-1]):
            return True, text.decode(errors="replace")
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False, text.decode(errors="replace")
        chunk = os.read(fd, 65536)
        if not chunk:
            return False, text.decode(errors="replace")
        text += chunk


@pytest.fixture
def standin_vllm(tmp_path):
    """start(acceptance) -> port of a stand-in `vllm serve` process on 127.0.0.1.

    start.wedge is its LAGUNA_STANDIN_WEDGE_FILE and start.pid the last one's
    PID: writing that PID to that file wedges its engine."""
    procs = []

    def start(acceptance):
        model, draft = tmp_path / "model", tmp_path / "draft"
        for path in (model, draft):
            path.mkdir(exist_ok=True)
            (path / "config.json").write_text("{}")
        package = tmp_path / "standin"
        if not package.exists():
            standin.patched_copy(package)
        env = dict(os.environ, PYTHONPATH=str(package),
                   LAGUNA_STANDIN_ACCEPTANCE=str(acceptance), LAGUNA_STANDIN_TOKENS_PER_S="2000",
                   LAGUNA_STANDIN_WEDGE_FILE=str(start.wedge))
        # free_port()'s port may be taken before the server binds it (other
        # tests run beside this one under pytest-xdist): then another port.
        for attempt in range(3):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.cli", "serve", str(model), "--host", "127.0.0.1",
                 "--port", str(port), "--served-model-name", SERVED_MODEL, "--enforce-eager",
                 "--distributed-executor-backend", "mp", "--max-model-len", str(MAX_MODEL_LEN),
                 # the collection's share (vLLM's default 0.92 fails the stand-in GPU's memory check)
                 "--gpu-memory-utilization", "0.85",
                 "--speculative-config", '{"method": "dflash", "model": "%s", "num_speculative_tokens": 6}' % draft],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(proc)
            # It logs this line once it has bound the port (or dies trying).
            started, log = _wait_for_line(proc, "Starting vLLM API server on http://127.0.0.1:%d" % port, 30)
            if started:
                for dummy in range(100):
                    try:
                        urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1)
                        start.pid = proc.pid
                        return port
                    except OSError:
                        if proc.poll() is not None:
                            break
                        time.sleep(0.1)
            if proc.poll() is None:
                raise RuntimeError("stand-in vllm did not start:\n" + log)
            error = log + proc.stderr.read().decode(errors="replace")
            if "Address already in use" not in error or attempt == 2:
                raise RuntimeError(error)
        raise AssertionError("not reached")

    start.wedge, start.pid = tmp_path / "wedge", None
    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
