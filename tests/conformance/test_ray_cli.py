"""The raylet commands the collection renders, against Ray 2.60.0's own CLI.

* Parsing: probe_ray.py runs each rendered `ray start` argv through Ray's click
  command (make_context: every option parsed and type-converted, nothing started).
* `ray status`: a real one-node Ray 2.60 head started here from the rendered head
  argv (loopback address, a free port, one CPU, `--num-gpus 1`, as the molecule
  nodes do), its `ray status` output parsed by plugins/module_utils/ray_status.py.
  The head runs in its own session, which the test ends by its process group.
* Token authentication: that head runs as the collection runs its raylets
  (RAY_AUTH_MODE=token, the token from the environment), and Ray's own clients
  are tried against it: `ray status`, a driver running a task, and a raylet
  joining (`ray start --address`), each without the token, with a wrong one,
  and (status, driver) with the right one from its file, as the collection's
  `ray` commands find it (RAY_AUTH_TOKEN_PATH).
* The stand-in vLLM on that head (its raylet has the stand-in on PYTHONPATH,
  a stand-in GPU device file and a node-local NCCL_IB_GID_INDEX): `vllm serve
  --distributed-executor-backend ray` as the collection runs it, TP 1. Its rank
  runs as `ray::RayWorkerProc.run` (the title Ray gives it, which the
  nvidia-smi stand-in reports), gets the driver's environment less what the
  node sets and what vLLM excludes; a SIGKILL of the rank ends the server with
  503 and status 0; a node short of memory fails the start with vLLM's
  message and status 1.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from _conformance import ROOT, run_in_venv
from ansible_collections.laguna.spark.plugins.module_utils import gpu_procs, ray_status

STANDIN = os.path.join(ROOT, "tests", "doubles", "vllm_standin")
NVIDIA_SMI = os.path.join(ROOT, "tests", "doubles", "bin", "nvidia-smi")


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


def _run(argv, env, timeout=90):
    """(rc, output) of a client command in a session of its own, bounded: on
    the timeout its whole process group (a raylet it started) is killed."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out = proc.communicate(timeout=timeout)[0]
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc, out = "timeout", ""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if rc == "timeout":
        out = proc.communicate()[0]
    return rc, out


DRIVER = ("import ray, sys\n"
          "ray.init(address=sys.argv[1], log_to_driver=False)\n"
          "print('RAN', ray.get(ray.remote(num_cpus=0)(lambda: 'on the head').remote()))\n")


@pytest.fixture(scope="module")
def real_head(ray_bin, head):
    """A real Ray 2.60 head with token authentication, and what Ray's clients got from it."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rayc-", dir="/tmp")  # short: Ray's socket paths
    token = "%064x" % int.from_bytes(os.urandom(32), "big")
    token_path = os.path.join(temp, "auth_token")
    with open(token_path, "w") as handle:
        handle.write(token)
    argv = [ray_bin] + head["ray"]["argv"][1:]
    argv = _set(_set(argv, "--node-ip-address", "127.0.0.1"), "--port", str(port))
    argv += ["--num-cpus", "1", "--num-gpus", "1", "--temp-dir", temp, "--include-dashboard", "false",
             "--disable-usage-stats"]
    base = dict((k, v) for k, v in os.environ.items() if not k.startswith("RAY_AUTH"))
    base.update(RAY_USAGE_STATS_ENABLED="0", RAY_memory_monitor_refresh_ms="0", HOME=temp)
    # As the collection's units run Ray: the mode in the environment, the token from the private file.
    server_env = dict(base, RAY_AUTH_MODE=head["ray"]["environment"]["RAY_AUTH_MODE"], RAY_AUTH_TOKEN=token)
    # The stand-in vLLM for its ranks, this node's stand-in GPU and a value of its own.
    device = os.path.join(temp, "nvidia0")
    open(device, "w").close()
    server_env.update(PYTHONPATH=STANDIN, LAGUNA_STANDIN_GPU_DEVICE=device,
                      LAGUNA_STANDIN_STATE_DIR=os.path.join(temp, "state"), NCCL_IB_GID_INDEX="5")
    # As the collection's `ray` commands run (laguna_ray_client_env).
    client_env = dict(base, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
    address = "127.0.0.1:%d" % port
    log = open(os.path.join(temp, "head.log"), "w")
    started = time.time()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=server_env, start_new_session=True)
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
            rc, text = _run([ray_bin, "status", "--address", address], client_env, 60)
            if rc == 0 and "Active:" in text and "GPU" in text:
                out = text
                break
            time.sleep(2)
        if out is None:
            log.flush()
            raise AssertionError("the Ray 2.60 head did not come up:\n" + open(log.name).read()[-3000:])
        print("ray head up and `ray status` answered in %.1f s" % (time.time() - started))
        wrong = dict(base, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="%064x" % 7)
        python = os.path.join(os.path.dirname(ray_bin), "python")
        outcomes = {
            "status": out,
            "status_no_token": _run([ray_bin, "status", "--address", address], base, 60),
            "status_wrong_token": _run([ray_bin, "status", "--address", address], wrong, 60),
            "driver_no_token": _run([python, "-c", DRIVER, address], base, 90),
            "driver_wrong_token": _run([python, "-c", DRIVER, address], wrong, 90),
            "driver_token": _run([python, "-c", DRIVER, address], client_env, 120),
        }
        # A raylet joining without the token: in a temp dir and on ports of its own.
        join_temp = tempfile.mkdtemp(prefix="rayj-", dir="/tmp")
        join = [ray_bin, "start", "--block", "--address", address, "--node-ip-address", "127.0.0.1",
                "--num-cpus", "1", "--temp-dir", join_temp, "--disable-usage-stats",
                "--node-manager-port", str(_free_port()), "--object-manager-port", str(_free_port()),
                "--min-worker-port", "20002", "--max-worker-port", "20099"]
        outcomes["join_no_token"] = _run(join, dict(base, HOME=join_temp), 90)
        outcomes["status_after"] = _run([ray_bin, "status", "--address", address], client_env, 60)
        shutil.rmtree(join_temp, ignore_errors=True)
        outcomes["standin"] = _standin_on(python, address, client_env, temp, device)
        return outcomes
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


def _health(port):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _serve(python, address, client_env, temp, log_name):
    """The stand-in `vllm serve` on the head, as the collection runs it (TP 1 here): (process, port, log path)."""
    model = os.path.join(temp, "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as handle:
        handle.write("{}")
    config = os.path.join(temp, "vllm-config")
    os.makedirs(config, exist_ok=True)
    with open(os.path.join(config, "ray_non_carry_over_env_vars.json"), "w") as handle:
        json.dump(["LAGUNA_HEAD_ONLY"], handle)
    env = dict(client_env, PYTHONPATH=STANDIN, RAY_ADDRESS=address, VLLM_CONFIG_ROOT=config,
               NCCL_IB_GID_INDEX="3", NCCL_IB_HCA="rocep1s0f1", VLLM_HOST_IP="127.0.0.1", LAGUNA_HEAD_ONLY="1",
               VLLM_API_KEY="standin-key")
    port = _free_port()
    path = os.path.join(temp, log_name)
    with open(path, "w") as log:
        proc = subprocess.Popen([python, "-m", "vllm.entrypoints.cli", "serve", model, "--served-model-name", "m",
                                 "--distributed-executor-backend", "ray", "--tensor-parallel-size", "1",
                                 "--enforce-eager", "--gpu-memory-utilization", "0.85",
                                 "--kv-cache-memory-bytes", "5368709120", "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, port, path


def _end(proc, timeout):
    """The process's status within timeout s, else "timeout" (its group killed)."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _standin_on(python, address, client_env, temp, device):
    """The stand-in vLLM on the real head: a rank killed while serving, then a start short of memory."""
    out = {}
    proc, port, log = _serve(python, address, client_env, temp, "standin.log")
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and _health(port) != 200:
        time.sleep(0.5)
    out["health_before"] = _health(port)
    state = os.path.join(temp, "state", "rank-0.json")
    if out["health_before"] == 200 and os.path.exists(state):
        with open(state) as handle:
            out["rank"] = json.load(handle)
        out["state_mode"] = oct(os.stat(state).st_mode & 0o777)
        pid = out["rank"]["pid"]
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            out["title"] = handle.read().split(b"\0")[0].decode().strip()
        out["nvidia_smi"] = subprocess.run(
            ["sh", NVIDIA_SMI, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"],
            env=dict(os.environ, LAGUNA_STANDIN_GPU_DEVICE=device), capture_output=True, text=True,
            timeout=30, check=False).stdout
        killed = time.time()
        os.kill(pid, signal.SIGKILL)  # the rank dies, as when its raylet is killed
        codes = []
        while time.time() < killed + 60 and proc.poll() is None:
            code = _health(port)
            if code != 200 and code not in codes and code is not None:
                codes.append(code)
                out["unhealthy_after_s"] = time.time() - killed
            time.sleep(0.2)
        out["codes_after_kill"] = codes
        out["rc"] = _end(proc, 30)
        out["exit_after_s"] = time.time() - killed
    else:
        out["rc"] = _end(proc, 5)
    out["log"] = open(log).read()
    # A node short of memory: the stand-in GPU with 30 GiB more in use.
    with open(device + ".memory", "w") as handle:
        json.dump({"used_bytes": (11592 << 20) + (30 << 30)}, handle)
    try:
        proc, port, log = _serve(python, address, client_env, temp, "short.log")
        out["short_rc"] = _end(proc, 120)
        out["short_log"] = open(log).read()
    finally:
        os.unlink(device + ".memory")
    return out


@pytest.fixture(scope="module")
def standin(real_head):
    return real_head["standin"]


def test_the_standin_rank_runs_as_ray_worker_proc_run(standin):
    """Ray titles the rank's process ray::<class>.<method> while run() runs, which it does until it dies;
    nvidia-smi (its stand-in) names the GPU's holder so."""
    assert standin["health_before"] == 200, standin["log"][-3000:]
    assert standin["title"] == "ray::RayWorkerProc.run"
    held = gpu_procs.parse(standin["nvidia_smi"])
    assert [(p["pid"], p["name"]) for p in held] == [(standin["rank"]["pid"], "ray::RayWorkerProc.run")]
    assert standin["rank"]["actor_name"].startswith("vllm_Worker_") and standin["rank"]["rank"] == 0


def test_the_standin_rank_gets_the_drivers_environment_less_the_nodes_own(standin):
    environ = standin["rank"]["environ"]
    assert environ["NCCL_IB_GID_INDEX"] == "5"  # the node's raylet has it: the node's value
    assert environ["NCCL_IB_HCA"] == "rocep1s0f1"  # only the driver has it: the driver's
    assert "LAGUNA_HEAD_ONLY" not in environ  # in ray_non_carry_over_env_vars.json
    assert "VLLM_HOST_IP" not in environ  # worker-specific
    assert environ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"  # the actors' runtime_env
    assert environ["VLLM_API_KEY"].startswith("<redacted sha256:") and standin["state_mode"] == "0o600"
    assert "(RayWorkerProc pid=%d) INFO" % standin["rank"]["pid"] in standin["log"]
    assert "] Initial free memory 110." in standin["log"] and "GiB, reserved 5.0 GiB memory for KV Cache" in standin["log"]


def test_a_dead_rank_ends_the_standin_with_503_and_status_0(standin):
    log = standin["log"]
    assert "] RayWorkerProc rank=[0] died unexpectedly, shutting down executor." in log, log[-3000:]
    assert "] EngineCore encountered a fatal error." in log and "RuntimeError: Executor failed." in log
    assert standin["codes_after_kill"] == [503], standin["codes_after_kill"]
    assert standin["rc"] == 0, log[-3000:]
    assert "INFO:     Shutting down" in log and "INFO:     Finished server process [" in log
    # Ray reports the death at once; the monitor's 5 s wait and the watchdog's 5 s bound the rest
    assert standin["unhealthy_after_s"] < 10 and standin["exit_after_s"] < 15, standin


def test_a_rank_short_of_memory_fails_the_start_as_vllm_does(standin):
    log = standin["short_log"]
    assert standin["short_rc"] == 1, log[-3000:]
    assert "] EngineCore failed to start." in log and "ray::RayWorkerProc.initialize_worker()" in log
    # 110.37 GiB less 30 GiB less the rank's own memory (its RSS, as nvidia-smi reports it)
    assert re.search(r"ValueError: Free memory on device cuda:0 \(80\.[23]\d/121\.69 GiB\) on startup is less than "
                     r"desired GPU memory utilization \(0\.85, 103\.44 GiB\)\. Decrease GPU memory utilization "
                     r"or reduce GPU memory used by other processes\.", log), log[-3000:]
    assert log.rstrip().endswith("RuntimeError: Engine core initialization failed. See root cause above. "
                                 "Failed core proc(s): {'EngineCore': 1}")


@pytest.fixture(scope="module")
def real_status(real_head):
    return real_head["status"]


def test_the_rendered_raylets_run_with_token_authentication(head, workers):
    for host in [head] + workers:
        assert host["ray"]["environment"]["RAY_AUTH_MODE"] == "token"
        assert not any("TOKEN" in key and key != "RAY_AUTH_MODE" for key in host["ray"]["environment"])


def test_ray_clients_without_the_token_are_refused(real_head):
    for case in ("status_no_token", "status_wrong_token", "driver_no_token", "driver_wrong_token"):
        rc, text = real_head[case]
        assert rc != 0 and "RAN" not in text, (case, text[-2000:])
        assert "auth" in text.lower() or "token" in text.lower(), (case, text[-2000:])


def test_a_raylet_without_the_token_cannot_join(real_head):
    rc, text = real_head["join_no_token"]
    assert rc != 0, text[-2000:]
    rc, after = real_head["status_after"]
    assert rc == 0 and len(ray_status.parse(after)["active_nodes"]) == 1, after


def test_a_driver_with_the_token_runs_a_task(real_head):
    rc, text = real_head["driver_token"]
    assert rc == 0 and "RAN on the head" in text, text[-2000:]


def test_ray_status_parser_reads_a_real_ray_2_60_head(real_status):
    parsed = ray_status.parse(real_status)
    assert len(parsed["active_nodes"]) == 1, real_status
    assert parsed["pending_nodes"] == [] and parsed["recent_failures"] == []
    gpu = parsed["resources"]["GPU"]
    assert (gpu["used"], gpu["total"], gpu["reserved"]) == (0.0, 1.0, 0.0), real_status
    assert parsed["resources"]["CPU"]["total"] == 1.0
    assert parsed["resources"]["object_store_memory"]["total"] > 1.8e9  # the rendered 2,000,000,000 bytes
    assert parsed["pending_demands"] == []


def _ray_source(vllm_python, relative):
    """A file of the real Ray package in the conformance venv."""
    root = subprocess.run([vllm_python, "-c", "import importlib.util as u; "
                           "print(u.find_spec('ray').submodule_search_locations[0])"],
                          capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    with open(os.path.join(root, relative)) as handle:
        return handle.read()


def test_every_raylet_stops_without_ray_s_drain_as_ray_reads_it(vllm_python, head, workers):
    """The raylets' RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S (ray_cluster_drain_timeout) is the
    variable Ray 2.60 reads for its SIGTERM drain, and the value rendered turns the drain off
    by Ray's own test (a timeout <= 0 returns before draining)."""
    import ast
    constants = ast.parse(_ray_source(vllm_python, "_private/ray_constants.py"))
    read = [node for node in ast.walk(constants) if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S" for t in node.targets)]
    assert read, "ray_constants no longer defines RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
    call = read[0].value
    assert isinstance(call, ast.Call) and ast.literal_eval(call.args[0]) == "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
    assert ast.literal_eval(call.args[1]) == 30.0  # the default the README's row names
    node_py = ast.parse(_ray_source(vllm_python, "_private/node.py"))
    drain = [f for f in ast.walk(node_py) if isinstance(f, ast.FunctionDef) and f.name == "_drain_node_before_shutdown"]
    assert drain, "Ray's node no longer drains on SIGTERM in _drain_node_before_shutdown"
    guards = [stmt for stmt in drain[0].body if isinstance(stmt, ast.If)
              and ast.unparse(stmt.test).replace(" ", "") == "timeout_s<=0"
              and isinstance(stmt.body[0], ast.Return)]
    assert guards, "Ray's drain no longer returns at once for a timeout <= 0"
    for host in [head] + list(workers):
        value = host["ray"]["environment"]["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"]
        assert float(value) <= 0, value
