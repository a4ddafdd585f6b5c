"""The raylet commands the collection renders, against Ray 2.60.0's own CLI.

* Parsing: probe_ray.py runs each rendered `ray start` argv through Ray's click
  command (make_context: every option parsed and type-converted, nothing started).
* `ray status`: a real one-node Ray 2.60 head started here from the rendered head
  argv (loopback address, a free port, one CPU, `--num-gpus 1`, as the molecule
  nodes do), its `ray status` output parsed by plugins/module_utils/ray_status.py.
  The head runs in its own session, which the test ends by its process group.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from _conformance import run_in_venv
from ansible_collections.laguna.spark.plugins.module_utils import ray_status


def _set(argv, flag, value):
    """argv with --flag set to value (either spelling), appended if absent."""
    out, i, found = [], 0, False
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            out += [flag, value]
            i += 2
            found = True
            continue
        if arg.startswith(flag + "="):
            out.append("%s=%s" % (flag, value))
            found = True
        else:
            out.append(arg)
        i += 1
    return out if found else out + [flag, value]


@pytest.fixture(scope="module")
def parsed(vllm_python, head, workers):
    cases = {"head": head["ray"]["argv"], "worker": workers[0]["ray"]["argv"],
             "bad_flag": head["ray"]["argv"] + ["--object-store-mem=1"],
             "bad_value": _set(head["ray"]["argv"], "--object-store-memory", "2G")}
    return run_in_venv(vllm_python, "probe_ray.py", {"cases": cases})


def test_ray_version_is_the_pinned_one(parsed):
    assert parsed["ray_version"] == "2.60.0"


def test_rendered_head_flags_parse(parsed, head):
    case = parsed["cases"]["head"]
    assert "error" not in case, case["error"]
    params = case["params"]
    assert params["head"] is True and params["block"] is True
    assert params["node_ip_address"] == head["roce_ip"]
    assert params["port"] == 6379
    assert params["object_store_memory"] == 2000000000
    assert case["not_exact_flags"] == []


def test_rendered_worker_flags_parse(parsed, head, workers):
    case = parsed["cases"]["worker"]
    assert "error" not in case, case["error"]
    params = case["params"]
    assert "head" not in params and params["block"] is True
    assert params["address"] == "%s:6379" % head["roce_ip"]
    assert params["node_ip_address"] == workers[0]["roce_ip"]
    assert params["object_store_memory"] == 2000000000


def test_ray_rejects_what_it_should(parsed):
    assert parsed["cases"]["bad_flag"]["error"].startswith("NoSuchOption")
    assert parsed["cases"]["bad_value"]["error"].startswith("BadParameter")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def real_status(ray_bin, head):
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rayc-", dir="/tmp")  # short: Ray's socket paths
    argv = [ray_bin] + head["ray"]["argv"][1:]
    argv = _set(_set(argv, "--node-ip-address", "127.0.0.1"), "--port", str(port))
    argv += ["--num-cpus", "1", "--num-gpus", "1", "--temp-dir", temp, "--include-dashboard", "false",
             "--disable-usage-stats"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_memory_monitor_refresh_ms="0")
    log = open(os.path.join(temp, "head.log"), "w")
    started = time.time()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline, out = time.time() + 90, None
        while time.time() < deadline:
            if proc.poll() is not None:
                break
            try:  # the GCS port first: each `ray status` costs an import of Ray
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.5)
                continue
            res = subprocess.run([ray_bin, "status", "--address", "127.0.0.1:%d" % port], env=env,
                                 capture_output=True, text=True, timeout=60, check=False)
            if res.returncode == 0 and "Active:" in res.stdout and "GPU" in res.stdout:
                out = res.stdout
                break
            time.sleep(2)
        if out is None:
            log.flush()
            raise AssertionError("the Ray 2.60 head did not come up:\n" + open(log.name).read()[-3000:])
        print("ray head up and `ray status` answered in %.1f s" % (time.time() - started))
        return out
    finally:
        # End this head: its session is ours alone (start_new_session).
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # and anything of it left in the group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_status_parser_reads_a_real_ray_2_60_head(real_status):
    parsed = ray_status.parse(real_status)
    assert len(parsed["active_nodes"]) == 1, real_status
    assert parsed["pending_nodes"] == [] and parsed["recent_failures"] == []
    gpu = parsed["resources"]["GPU"]
    assert (gpu["used"], gpu["total"], gpu["reserved"]) == (0.0, 1.0, 0.0), real_status
    assert parsed["resources"]["CPU"]["total"] == 1.0
    assert parsed["resources"]["object_store_memory"]["total"] > 1.8e9  # the rendered 2,000,000,000 bytes
    assert parsed["pending_demands"] == []
