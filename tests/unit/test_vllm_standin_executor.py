"""The stand-in vLLM where it fails as vLLM 0.25.1 does, without a Ray cluster: the placement
wait, the rank order, the environment a rank gets, the start-up memory check on the stand-in
GPU, the dead engine's 503 and the watchdog that ends the server, the log lines.
(tests/conformance/test_vllm_ray_executor.py compares each with vLLM's own code;
tests/conformance/test_ray_cli.py runs the stand-in on a real Ray head.)"""
import inspect
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from helpers import DOUBLES, gpu, standin

cli, speed_model, executor, metrics, gpu_worker = standin.modules(
    "vllm.entrypoints.cli", "vllm.entrypoints.speed_model", "vllm.v1.executor.ray_executor_v2",
    "vllm.v1.spec_decode.metrics", "vllm.v1.worker.gpu_worker")

GiB = 1 << 30
TWO = [{"GPU": 1.0}, {"GPU": 1.0}]


def run_wait(specs, ready_at):
    """The stand-in's placement wait on a fake clock: (logged seconds, error or None, seconds waited)."""
    clock = {"now": 0.0}
    waits, lines = [], []

    def wait(seconds):
        waits.append(seconds)
        if ready_at is not None and clock["now"] + seconds >= ready_at:
            clock["now"] = max(clock["now"], ready_at)
            return True
        clock["now"] += seconds
        return False

    try:
        executor.wait_until_pg_ready(specs, wait, lambda: ready_at is not None and clock["now"] >= ready_at,
                                     now=lambda: clock["now"], log=lines.append)
        error = None
    except ValueError as exc:
        error = str(exc)
    return waits, lines, error, clock["now"]


def test_the_placement_wait_doubles_from_10_s_and_gives_up_after_1800_s():
    waits, lines, error, waited = run_wait(TWO, None)
    assert waits == [10, 20, 40, 80, 160, 320, 640, 1280]
    assert [int(line.split("specs for ")[1].split()[0]) for line in lines] == [10, 30, 70, 150, 310, 630, 1270, 2550]
    assert lines[0].startswith("Waiting for creating a placement group of specs for 10 seconds. "
                               "specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status`")
    assert waited == 2550 and error.startswith(
        "Cannot provide a placement group requiring 2.0 GPUs (placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}]) "
        "within 1800 seconds.\nTensor parallel size may exceed available GPUs in your cluster.")
    assert run_wait([{"GPU": 1.0}], None)[2] == (
        "Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}] within 1800 seconds. "
        "See `ray status` and `ray list nodes` to make sure the cluster has enough resources.")
    # ready meanwhile: no error, one line per wait that ended without it
    waits, lines, error, waited = run_wait(TWO, 35)
    assert (waits, len(lines), error, waited) == ([10, 20, 40], 2, None, 35)
    assert run_wait(TWO, 0)[1:] == ([], None, 0)


def test_the_give_up_time_is_vllms_constant_and_no_variable_changes_it(monkeypatch):
    assert executor.PG_WAIT_TIMEOUT == 1800
    assert inspect.signature(executor.wait_until_pg_ready).parameters["timeout"].default == 1800
    source = inspect.getsource(executor)
    assert "PG_WAIT_TIMEOUT" not in "".join(line for line in source.splitlines() if "environ" in line)


def test_placement_is_one_gpu_per_rank_and_ranks_go_driver_node_first():
    assert executor.placement_group_specs(2) == TWO
    # the head (the driver's node) first, although the worker's node id sorts before it
    ranks = executor.sort_bundles_driver_first(TWO, {0: "aaaa", 1: "ffff"},
                                               {"ffff": "192.168.100.1", "aaaa": "192.168.100.2"}, "ffff")
    assert ranks == [(1, "ffff", "192.168.100.1"), (0, "aaaa", "192.168.100.2")]
    names = [executor.build_actor_name("abcde", r, 2, 1) for r in (0, 1)]
    assert names == ["vllm_Worker_abcde_TP0", "vllm_Worker_abcde_TP1"]
    warnings = executor.verify_bundles_warnings({0: "head", 1: "worker"}, TWO, 2)
    assert len(warnings) == 2 and warnings[0].startswith("tensor_parallel_size=2 is bigger than a reserved number "
                                                         "of GPUs (1 GPUs) in a node head.")


def test_a_rank_gets_the_drivers_environment_that_its_node_lacks(tmp_path):
    config = tmp_path / "cfg"
    config.mkdir()
    (config / "ray_non_carry_over_env_vars.json").write_text(json.dumps(["HEAD_ONLY"]))
    driver = {"VLLM_CONFIG_ROOT": str(config), "NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "rocep1s0f1",
              "HEAD_ONLY": "1", "VLLM_HOST_IP": "192.168.100.1", "CUDA_VISIBLE_DEVICES": "0"}
    carried = executor.get_driver_env_vars(environ=driver)
    assert carried == {"VLLM_CONFIG_ROOT": str(config), "NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "rocep1s0f1"}
    node = {"NCCL_IB_GID_INDEX": "5"}
    assert executor.apply_worker_env(node, {}, carried) == dict(carried, NCCL_IB_GID_INDEX="5")
    # not JSON: nothing excluded, with vLLM's warning
    (config / "ray_non_carry_over_env_vars.json").write_text("[oops")
    warnings = []
    assert executor.non_carry_over_env_vars(driver, warnings.append) == set()
    assert warnings == ["Failed to parse %s/ray_non_carry_over_env_vars.json. Using an empty set for "
                        "non-carry-over env vars." % config]
    # the default place: $XDG_CONFIG_HOME/vllm, else ~/.config/vllm
    assert executor.config_root({"XDG_CONFIG_HOME": "/x"}) == "/x/vllm"
    assert executor.config_root({}) == os.path.expanduser("~/.config/vllm")


def test_each_rank_writes_its_environment_for_the_tests_secrets_digested(tmp_path):
    shown = executor.shown_environ({"NCCL_IB_HCA": "h", "VLLM_API_KEY": "k", "RAY_AUTH_TOKEN": "t"})
    assert shown["NCCL_IB_HCA"] == "h" and shown["VLLM_API_KEY"].startswith("<redacted sha256:")
    assert shown["RAY_AUTH_TOKEN"] != "t"
    path = executor.write_state(str(tmp_path / "state"), 1, {"rank": 1, "environ": shown})
    assert json.load(open(path))["environ"] == shown and path.endswith("rank-1.json")
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(tmp_path / "state").st_mode & 0o777 == 0o700


def test_the_stand_in_gpu_passes_the_collections_share_and_fails_vllms_default(tmp_path):
    device = str(tmp_path / "nvidia0")
    open(device, "w").close()
    snap = gpu_worker.snapshot(device)
    assert (gpu_worker.format_gib(snap["free_memory"]), gpu_worker.format_gib(snap["total_memory"])) == \
        ("110.37", "121.69")
    assert gpu_worker.request_memory(snap, 0.85) == 111064488346 == -(-124611 * (1 << 20) * 85 // 100)
    with pytest.raises(ValueError) as failed:
        gpu_worker.request_memory(snap, 0.92)
    assert str(failed.value) == (
        "Free memory on device cuda:0 (110.37/121.69 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 111.96 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.")


def test_a_test_lowers_a_nodes_free_memory_with_the_memory_file(tmp_path):
    device = str(tmp_path / "nvidia0")
    open(device, "w").close()
    with open(device + ".memory", "w") as handle:
        json.dump({"used_bytes": (11592 << 20) + 30 * GiB}, handle)
    with pytest.raises(ValueError, match=r"^Free memory on device cuda:0 \(80\.37/121\.69 GiB\) on startup is less "
                                         r"than desired GPU memory utilization \(0\.85, 103\.44 GiB\)\."):
        gpu_worker.request_memory(gpu_worker.snapshot(device), 0.85)
    with open(device + ".memory", "w") as handle:
        json.dump({"total_bytes": 24 * GiB, "used_bytes": 0}, handle)
    assert gpu_worker.snapshot(device)["total_memory"] == 24 * GiB
    with open(device + ".memory", "w") as handle:
        handle.write("24G")
    with pytest.raises(RuntimeError, match="stand-in GPU memory file .*nvidia0.memory"):
        gpu_worker.snapshot(device)


def test_what_holds_the_gpu_counts_as_nvidia_smi_reports_it(tmp_path):
    device = str(tmp_path / "nvidia0")
    open(device, "w").close()
    free = gpu_worker.snapshot(device)["free_memory"]
    with gpu.holding(device) as holder:
        held = gpu_worker.holders(device)
        smi = subprocess.run(["sh", os.path.join(DOUBLES, "bin", "nvidia-smi"),
                              "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"],
                             env=dict(os.environ, LAGUNA_STANDIN_GPU_DEVICE=device), capture_output=True, text=True,
                             check=True).stdout
        reported = {int(line.split(", ")[0]): int(line.split(", ")[-1]) for line in smi.splitlines()}
        assert held == reported and holder.pid in held
        assert gpu_worker.snapshot(device)["free_memory"] == free - sum(held.values()) * (1 << 20)


def serve(tmp_path, *args, **env):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli", "serve", str(model), "--port", "0",
                           "--distributed-executor-backend", "mp"] + list(args),
                          env=dict(os.environ, PYTHONPATH=standin.STANDIN,
                                   LAGUNA_STANDIN_GPU_DEVICE=str(tmp_path / "gpu"), **env),
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_start_short_of_memory_ends_as_vllms_with_status_1(tmp_path):
    failed = serve(tmp_path)  # vLLM's default 0.92
    assert failed.returncode == 1
    lines = failed.stderr.splitlines()
    assert "] EngineCore failed to start." in lines[0] and lines[0].startswith("ERROR ")
    assert lines[-2].startswith("ValueError: Free memory on device cuda:0 (110.37/121.69 GiB) on startup")
    assert lines[-1] == ("RuntimeError: Engine core initialization failed. See root cause above. "
                         "Failed core proc(s): {'EngineCore': 1}")
    assert serve(tmp_path, "--gpu-memory-utilization", "1.5").returncode != 0


def test_with_kv_cache_memory_bytes_the_check_still_runs_and_the_line_is_logged(tmp_path):
    failed = serve(tmp_path, "--kv-cache-memory-bytes", "5368709120")
    assert failed.returncode == 1 and "less than desired GPU memory utilization (0.92, " in failed.stderr


def test_a_dead_engine_answers_503_and_the_watchdog_ends_the_server(monkeypatch):
    engine = standin.engine("m")
    server = cli.ApiServer(engine, "127.0.0.1", 0, environ={})
    base = "http://127.0.0.1:%d" % server.server.server_address[1]
    done = threading.Event()
    monkeypatch.setattr(cli, "WATCHDOG_TIME_S", 0.2)

    def run():
        server.serve()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert urllib.request.urlopen(base + "/health", timeout=5).status == 200
    engine.executor_failed()
    with pytest.raises(urllib.error.HTTPError) as unhealthy:
        urllib.request.urlopen(base + "/health", timeout=5)
    assert unhealthy.value.code == 503
    # the server returns by itself (vLLM's watchdog: every 5 s, 0.2 here)
    assert done.wait(10), "the server kept serving a dead engine"


def test_a_request_to_a_dead_engine_gets_vllms_error_and_stops_the_server():
    engine = standin.engine("m", 0)
    server = cli.ApiServer(engine, "127.0.0.1", 0, environ={})
    base = "http://127.0.0.1:%d" % server.server.server_address[1]
    threading.Thread(target=server.server.serve_forever, daemon=True).start()
    engine.dead = True
    req = urllib.request.Request(base + "/v1/completions", data=b'{"prompt": "x", "max_tokens": 2}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(req, timeout=5)
    assert failed.value.code == 500 and json.loads(failed.value.read()) == cli.ENGINE_DEAD_RESPONSE[1]
    assert server.should_exit.wait(5)


def test_keep_alive_on_engine_death_keeps_serving():
    engine = standin.engine("m", 0)
    server = cli.ApiServer(engine, "127.0.0.1", 0, environ={"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"})
    engine.dead = True
    server.terminate_if_errored()
    assert not server.should_exit.is_set()
    server.server.server_close()


def test_the_spec_decoding_line_reports_the_drafts_since_the_last_one(capsys):
    engine = standin.engine("m")
    engine.speed.step_s = 0.0
    pieces = [w for group in engine.steps(40, "prompt", 3) for w in group]
    assert len(pieces) == 40
    engine.log_stats()
    line = capsys.readouterr().err.strip()
    c = engine.counters
    assert line.startswith("INFO ") and "[metrics.py:120] SpecDecoding metrics: Mean acceptance length: " in line
    assert "Accepted: %d tokens, Drafted: %d tokens" % (c["accepted"], c["draft_tokens"]) in line
    rates = ", ".join("%.3f" % (n / c["drafts"]) for n in c["accepted_per_pos"])
    assert "Per-position acceptance rate: %s, Avg Draft acceptance rate: " % rates in line
    engine.log_stats()  # nothing drafted since: no line
    assert capsys.readouterr().err == ""
    assert metrics.log_stats_interval({"VLLM_LOG_STATS_INTERVAL": "-1"}) == 10.0


def test_every_counter_and_histogram_has_its_created_series():
    """prometheus_client writes a `<name>_created` gauge beside every counter and histogram, and nothing else."""
    text = standin.engine("m").metrics()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    totals = {name[:-len("_total")] for name, kind in types.items() if kind == "counter"}
    histograms = {name for name, kind in types.items() if kind == "histogram"}
    created = {line.split("{")[0][:-len("_created")] for line in text.splitlines()
               if not line.startswith("#") and line.split("{")[0].endswith("_created")}
    assert "vllm:prompt_tokens" in totals and "vllm:time_to_first_token_seconds" in histograms
    assert all(name + "_total" in text for name in totals)
    assert created == totals | histograms


def _sample(text, name):
    """The value of the one sample ``name`` (with its labels, e.g. 'x_bucket{...le="+Inf"...}') in /metrics."""
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if not line.startswith("#") and line.split(" ")[0].split("{")[0] == name.split("{")[0]
             and all(part in line for part in name.split("{")[1:])]
    assert len(found) == 1, (name, found)
    return found[0]


def test_the_scheduler_gauges_and_the_request_histograms_follow_the_requests():
    engine = standin.engine("m", kv_cache_memory_bytes=5368709120)
    engine.speed.step_s = 0.0
    assert engine.kv_tokens == 273095  # the recipe's pool for 5 GiB
    steps = engine.steps(40, "prompt", 100)
    first = next(steps)
    text = engine.metrics()
    assert _sample(text, "vllm:num_requests_running") == 1.0 and _sample(text, "vllm:num_requests_waiting") == 0.0
    assert _sample(text, "vllm:kv_cache_usage_perc") == (100 + len(first)) / 273095.0
    assert _sample(text, "vllm:time_to_first_token_seconds_count") == 1.0
    rest = list(steps)
    text = engine.metrics()
    assert _sample(text, "vllm:num_requests_running") == 0.0 and _sample(text, "vllm:kv_cache_usage_perc") == 0.0
    assert len(first) + sum(len(g) for g in rest) == 40 == _sample(text, "vllm:generation_tokens_total")
    assert _sample(text, "vllm:inter_token_latency_seconds_count") == len(rest)
    assert _sample(text, "vllm:iteration_tokens_total_count") == 1 + len(rest)
    assert _sample(text, "vllm:iteration_tokens_total_sum") == 100 + 40
    for name, count in (("vllm:time_to_first_token_seconds", 1), ("vllm:inter_token_latency_seconds", len(rest))):
        buckets = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "_bucket{")]
        assert buckets == sorted(buckets) and buckets[-1] == count
        assert _sample(text, name + '_bucket{le="+Inf"') == count
    # prometheus_client's order: the metric's labels, then le
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.001"}' in text
    assert 'le="2560.0"' in text and 'vllm:iteration_tokens_total_bucket{engine="0",model_name="m",le="16384.0"}' in text


def test_the_acceptance_file_changes_the_acceptance_of_a_running_server(tmp_path):
    path = tmp_path / "acceptance"
    speed = speed_model.SpeedModel(6, {"LAGUNA_STANDIN_ACCEPTANCE": "0.5",
                                       "LAGUNA_STANDIN_ACCEPTANCE_FILE": str(path)})
    assert [speed.accepted_this_step() for _step in range(5)] == [3] * 5
    path.write_text("0\n")
    assert [speed.accepted_this_step() for _step in range(5)] == [0] * 5
    path.write_text("1")
    assert [speed.accepted_this_step() for _step in range(5)] == [6] * 5
    path.write_text("not a number")
    assert speed.accepted_this_step() == 3
    path.unlink()
    assert speed.accepted_this_step() == 3


def test_each_ranks_kv_line_carries_rays_prefix(capsys):
    ranks = [{"pid": 11, "ip": "192.168.100.1", "free_memory": 110 * GiB},
             {"pid": 12, "ip": "192.168.100.2", "free_memory": 100 * GiB}]
    cli.log_kv_cache_reserved(ranks, 5368709120, driver_ip="192.168.100.1")
    cli.log_kv_cache_reserved(ranks, None, driver_ip="192.168.100.1")  # without the flag: vLLM profiles instead
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("(RayWorkerProc pid=11) INFO ") and "[gpu_worker.py:459] Initial free memory 110.0 " \
        "GiB, reserved 5.0 GiB memory for KV Cache" in lines[0]
    assert lines[1].startswith("(RayWorkerProc pid=12, ip=192.168.100.2) INFO ")
