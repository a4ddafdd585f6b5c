"""The stand-in vLLM's Ray executor, memory check and log lines against vLLM 0.25.1's own code.

probe_ray_executor.py runs vLLM's functions in the conformance venv (Ray, the
clock and the platform replaced where they would need a cluster or a GPU);
each stand-in counterpart (tests/doubles/vllm_standin/vllm/v1/...) must give
the same answer on the same cases. What cannot run without a GPU or a cluster
is read from vLLM's source by AST: the placement strategy, the actor class and
the method the monitor watches, where each line is logged, the watchdog and
the exit path (the process returns normally: status 0), the memory snapshot of
an integrated GPU. The stand-in's behaviour under a real Ray 2.60 head is
tests/conformance/test_ray_cli.py's.
"""

import ast
import json
import os
import tempfile
import types

import pytest

from _conformance import METRICS_DRAFTS, function, run_in_venv, source_tree
from helpers import standin as standin_vllm

GiB = 1 << 30


@pytest.fixture(scope="module")
def standin():
    cli, executor, metrics, gpu = standin_vllm.modules("vllm.entrypoints.cli", "vllm.v1.executor.ray_executor_v2",
                                                       "vllm.v1.spec_decode.metrics", "vllm.v1.worker.gpu_worker")
    return types.SimpleNamespace(cli=cli, executor=executor, metrics=metrics, gpu=gpu)


# -- the cases, fed to vLLM and to the stand-in ------------------------------

TWO = [{"GPU": 1.0}, {"GPU": 1.0}]
WAIT = [{"specs": TWO, "ready_at": None}, {"specs": [{"GPU": 1.0}], "ready_at": None},
        {"specs": TWO, "ready_at": 35}, {"specs": TWO, "ready_at": 0}, {"specs": TWO, "ready_at": 1800}]
SORT = [
    # vLLM's docstring example: driver on node-A, bundles spread over three nodes
    {"specs": [{"GPU": 1.0}] * 6, "bundle_to_node": {"0": "node-C", "1": "node-A", "2": "node-B", "3": "node-C",
                                                     "4": "node-A", "5": "node-B"},
     "nodes": {"node-A": "10.0.0.1", "node-B": "10.0.0.2", "node-C": "10.0.0.3"}, "driver": "node-A"},
    # two Sparks, bundle 0 on the worker, whose node id sorts first: the head's bundle is rank 0
    {"specs": TWO, "bundle_to_node": {"0": "0000", "1": "ffff"},
     "nodes": {"ffff": "192.168.100.1", "0000": "192.168.100.2"}, "driver": "ffff"},
    # a bundle without a GPU is no rank
    {"specs": [{"CPU": 1.0}, {"GPU": 1.0}], "bundle_to_node": {"0": "a", "1": "b"},
     "nodes": {"a": "10.0.0.1", "b": "10.0.0.2"}, "driver": "a"},
]
NAMES = [["abcde", 0, 1, 1, 1], ["abcde", 1, 2, 1, 1], ["x", 3, 2, 2, 1], ["x", 5, 2, 1, 3]]
BASE = {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "rocep1s0f1", "VLLM_HOST_IP": "192.168.100.1",
        "CUDA_VISIBLE_DEVICES": "0", "LOCAL_RANK": "0", "VLLM_API_KEY": "k", "LAGUNA_RAYLETS": "a,b"}
ENV = [
    dict(environ=dict(BASE, VLLM_CONFIG_ROOT="@ROOT@/cfg", HOME="@ROOT@/home"),
         non_carry_over=json.dumps(["NCCL_IB_GID_INDEX", "NOT_SET"])),
    dict(environ=dict(BASE, XDG_CONFIG_HOME="@ROOT@/xdg", HOME="@ROOT@/home"), non_carry_over="not json"),
    dict(environ=dict(BASE, HOME="@ROOT@/home"), non_carry_over=json.dumps(["LAGUNA_RAYLETS"])),
    dict(environ=dict(BASE, HOME="@ROOT@/home"), non_carry_over=None),
]
INIT_ENV = [
    {"node": {"NCCL_IB_GID_INDEX": "5", "PATH": "/node/bin"},
     "env_vars": {}, "driver_env_vars": {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "rocep1s0f1", "PATH": "/head/bin"}},
    {"node": {"A": "node"}, "env_vars": {"A": "forced", "B": "forced"}, "driver_env_vars": {"A": "driver", "C": "driver"}},
]


def memory_cases(gpu):
    total, free = gpu.DEFAULT_TOTAL_BYTES, gpu.DEFAULT_TOTAL_BYTES - gpu.DEFAULT_USED_BYTES
    return [{"total": total, "free": free, "util": util} for util in (0.85, 0.9, 0.92, 1.0, 0.05)] + [
        {"total": total, "free": free - 30 * GiB, "util": 0.85}, {"total": 24 * GiB, "free": 20 * GiB, "util": 0.85}]


def spec_cases():
    return [{"k": 6, "steps": METRICS_DRAFTS, "elapsed": 10.0}, {"k": 3, "steps": [1], "elapsed": 0.0},
            {"k": 6, "steps": [0, 0], "elapsed": 7.5}, {"k": 6, "steps": [], "elapsed": 10.0}]


@pytest.fixture(scope="module")
def real(vllm_python, standin):
    gpu = standin.gpu
    request = {"wait": WAIT, "sort": SORT, "names": NAMES, "env": ENV, "init_env": INIT_ENV,
               "memory": memory_cases(gpu),
               "format_gib": [0, 1, 5368709120, gpu.DEFAULT_TOTAL_BYTES, 123456789012, GiB - 1],
               "kv_line": [[gpu.DEFAULT_TOTAL_BYTES - gpu.DEFAULT_USED_BYTES, 5368709120], [100 * GiB + 7, GiB]],
               "spec_log": spec_cases()}
    report = run_in_venv(vllm_python, "probe_ray_executor.py", request, timeout=300)
    errors = {k: v for k, v in report.items() if k.endswith("_error")}
    assert not errors, "\n".join(errors.values())
    return report


# -- placement ---------------------------------------------------------------

def standin_wait(executor, case):
    """The stand-in's wait on the probe's fake clock: (lines, error, elapsed)."""
    clock = {"now": 1000.0}
    ready_at = None if case["ready_at"] is None else 1000.0 + case["ready_at"]
    lines = []

    def wait(seconds):
        if ready_at is not None and clock["now"] + seconds >= ready_at:
            clock["now"] = max(clock["now"], ready_at)
            return True
        clock["now"] += seconds
        return False

    error = None
    try:
        executor.wait_until_pg_ready(case["specs"], wait, lambda: ready_at is not None and clock["now"] >= ready_at,
                                     now=lambda: clock["now"], log=lines.append)
    except ValueError as exc:
        error = str(exc)
    return {"lines": lines, "error": error, "elapsed": clock["now"] - 1000.0}


def test_the_placement_wait_doubles_from_10_s_and_gives_up_as_vllm_does(real, standin):
    assert real["constants"]["pg_wait_timeout"] == standin.executor.PG_WAIT_TIMEOUT == 1800
    for case, theirs in zip(WAIT, real["wait"]):
        assert standin_wait(standin.executor, case) == theirs, case
    never = real["wait"][0]
    assert never["error"].startswith("Cannot provide a placement group requiring 2.0 GPUs")
    # 10 + 20 + ... + 1280: the first wait that ends past 1800 s is the last
    assert never["elapsed"] == 2550 and len(never["lines"]) == 8


def _keywords(call):
    return {k.arg: ast.unparse(k.value) for k in call.keywords}


def test_the_placement_group_is_pack_with_one_gpu_per_rank_and_nothing_on_the_driver(vllm_src, standin):
    init = function(source_tree(vllm_src, "v1/executor/ray_utils.py"), "initialize_ray_cluster")
    calls = [n for n in ast.walk(init) if isinstance(n, ast.Call) and ast.unparse(n.func) == "ray.util.placement_group"]
    assert [_keywords(c).get("strategy") for c in calls] == ["'PACK'"]
    specs = [n for n in ast.walk(init) if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "placement_group_specs"]
    assert ast.unparse(specs[0].value) == "[{device_str: 1.0} for _ in range(parallel_config.world_size)]"
    v2 = source_tree(vllm_src, "v1/executor/ray_executor_v2.py")
    init_calls = [n for n in ast.walk(function(v2, "_init_executor")) if isinstance(n, ast.Call)
                  and ast.unparse(n.func) == "initialize_ray_cluster"]
    assert [_keywords(c).get("require_gpu_on_driver") for c in init_calls] == ["False"]
    assert standin.executor.placement_group_specs(2) == TWO
    ours = ast.parse(open(standin.executor.__file__).read())
    pg = [n for n in ast.walk(function(ours, "initialize_ray_cluster")) if isinstance(n, ast.Call)
          and ast.unparse(n.func) == "placement_group"]
    assert [_keywords(c).get("strategy") for c in pg] == ["'PACK'"]


def test_ranks_are_ordered_driver_node_first_as_vllm_sorts_them(real, standin):
    for case, theirs in zip(SORT, real["sort"]):
        ours = standin.executor.sort_bundles_driver_first(
            case["specs"], {int(k): v for k, v in case["bundle_to_node"].items()}, case["nodes"], case["driver"])
        assert [list(item) for item in ours] == theirs, case
    assert real["sort"][1] == [[1, "ffff", "192.168.100.1"], [0, "0000", "192.168.100.2"]]  # the head's first


def test_actor_names_are_vllms(real, standin):
    assert [standin.executor.build_actor_name(*case) for case in NAMES] == real["names"]


# -- the rank actor and the monitor ------------------------------------------

def test_the_rank_actor_is_ray_worker_proc_and_the_monitor_watches_its_run(vllm_src, standin):
    v2 = source_tree(vllm_src, "v1/executor/ray_executor_v2.py")
    classes = {n.name: n for n in v2.body if isinstance(n, ast.ClassDef)}
    methods = {f.name for f in classes["RayWorkerProc"].body if isinstance(f, ast.FunctionDef)}
    assert "run" in methods
    remote = [n for n in ast.walk(v2) if isinstance(n, ast.Call) and ast.unparse(n) == "ray.remote(RayWorkerProc)"]
    assert remote, "RayExecutorV2 no longer makes its actors from RayWorkerProc"
    options = [n for n in ast.walk(function(v2, "_init_executor")) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and n.func.attr == "options"]
    assert _keywords(options[0])["num_cpus"] == "0" and _keywords(options[0])["runtime_env"] == "runtime_env"
    # the sentinel the monitor waits on is each actor's run() call
    assert any(ast.unparse(n) == "self.actor.run.remote()" for n in ast.walk(v2))
    waits = [n for n in ast.walk(function(v2, "start_worker_monitor")) if isinstance(n, ast.Call)
             and ast.unparse(n.func) == "ray.wait"]
    assert [_keywords(w) for w in waits] == [{"num_returns": "1", "timeout": "5.0"}]
    assert standin.executor.MONITOR_WAIT_S == 5.0
    assert standin.executor.RayWorkerProc.__name__ == "RayWorkerProc"
    assert callable(standin.executor.RayWorkerProc.run)
    ours = ast.parse(open(standin.executor.__file__).read())
    assert any(ast.unparse(n) == "ray.remote(RayWorkerProc)" for n in ast.walk(ours))
    ours_options = [n for n in ast.walk(function(ours, "start")) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute) and n.func.attr == "options"]
    assert _keywords(ours_options[0])["num_cpus"] == "0" and _keywords(ours_options[0])["num_gpus"] == "1"
    # VLLM_RAY_PER_WORKER_GPUS, the actors' num_gpus, is 1.0 unless set
    envs = ast.unparse(source_tree(vllm_src, "envs.py"))
    assert "'VLLM_RAY_PER_WORKER_GPUS': lambda: float(os.getenv('VLLM_RAY_PER_WORKER_GPUS', '1.0'))" in envs


def test_the_actors_runtime_env_sets_vllms_noset_variables(real, vllm_src, standin):
    build = function(source_tree(vllm_src, "v1/executor/ray_executor_v2.py"), "_build_runtime_env")
    assert "env_vars.update({v: '1' for v in current_platform.ray_noset_device_env_vars})" in ast.unparse(build)
    assert real["constants"]["noset"] == standin.executor.RAY_NOSET_DEVICE_ENV_VARS
    start = ast.unparse(function(ast.parse(open(standin.executor.__file__).read()), "start"))
    assert "runtime_env = {'env_vars': {name: '1' for name in RAY_NOSET_DEVICE_ENV_VARS}}" in start


# -- where each line is logged, and its words ---------------------------------

# stand-in LOG_SITES key -> (anchor in vLLM's format string, the function holding the call or None)
ANCHORS = {
    "pg_waiting": ("Waiting for creating a placement group of specs", "_wait_until_pg_ready"),
    "pg_creating": ("No current placement group found", None),
    "pg_short": ("The number of required %ss exceeds the total", None),
    "pg_spread": ("is bigger than a reserved number of", None),
    "non_carry_over_unparsed": ("Failed to parse", None),
    "monitor_error": ("RayWorkerMonitor: unexpected error", None),
    "worker_died": ("died unexpectedly, shutting down executor", None),
    "kill_failed": ("Failed to kill actor rank", None),
    "engine_failed_to_start": ("EngineCore failed to start.", "run_engine_core"),
    "engine_fatal": ("EngineCore encountered a fatal error.", "run_engine_core"),
    "output_handler_failed": ("AsyncLLM output_handler failed.", None),
    "spec_decoding": ("SpecDecoding metrics: ", "log"),
}
FILES = {"ray_utils.py": "v1/executor/ray_utils.py", "ray_executor_v2.py": "v1/executor/ray_executor_v2.py",
         "ray_env.py": "ray/ray_env.py", "core.py": "v1/engine/core.py", "async_llm.py": "v1/engine/async_llm.py",
         "gpu_worker.py": "v1/worker/gpu_worker.py", "metrics.py": "v1/spec_decode/metrics.py"}


def log_calls(tree, anchor, within=None):
    """[(format string, line)] of the calls (in function ``within``, if given) whose first argument is a string
    holding anchor."""
    scope = function(tree, within) if within else tree
    return [(n.args[0].value, n.lineno) for n in ast.walk(scope) if isinstance(n, ast.Call) and n.args
            and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str) and anchor in n.args[0].value]


def standin_strings(module):
    tree = ast.parse(open(module.__file__).read())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_each_line_is_vllms_and_logged_where_vllm_logs_it(vllm_src, standin):
    sites = dict(standin.executor.LOG_SITES, **standin.cli.LOG_SITES)
    ours = standin_strings(standin.executor) | standin_strings(standin.cli) | standin_strings(standin.metrics)
    assert set(sites) == set(ANCHORS) | {"kv_cache_reserved"}
    for key, (anchor, within) in ANCHORS.items():
        filename, line = sites[key].split(":")
        found = log_calls(source_tree(vllm_src, FILES[filename]), anchor, within)
        assert len(found) == 1, (key, found)
        fmt, lineno = found[0]
        assert int(line) == lineno, "%s: vLLM logs it at %s:%d" % (key, filename, lineno)
        assert fmt in ours, "%s: the stand-in does not write vLLM's %r" % (key, fmt)
    # "Initial free memory ...": logger.info(msg) in determine_available_memory
    worker = function(source_tree(vllm_src, "v1/worker/gpu_worker.py"), "determine_available_memory")
    call = [n for n in ast.walk(worker) if isinstance(n, ast.Call) and ast.unparse(n) == "logger.info(msg)"]
    assert len(call) == 1 and sites["kv_cache_reserved"] == "gpu_worker.py:%d" % call[0].lineno
    assert standin.executor.WORKER_DIED == log_calls(
        source_tree(vllm_src, FILES["ray_executor_v2.py"]), "died unexpectedly")[0][0]


def test_the_kv_cache_and_spec_decoding_lines_are_vllms(real, standin):
    gpu = standin.gpu
    assert [gpu.kv_cache_reserved_message(free, kv) for free, kv in
            [[gpu.DEFAULT_TOTAL_BYTES - gpu.DEFAULT_USED_BYTES, 5368709120], [100 * GiB + 7, GiB]]] == real["kv_line"]
    ours = []
    for case in spec_cases():
        clock = {"now": 1000.0}
        logging = standin.metrics.SpecDecodingLogging(clock=lambda: clock["now"])
        for accepted in case["steps"]:
            logging.observe(1, case["k"], accepted, [1 if pos < accepted else 0 for pos in range(case["k"])])
        clock["now"] += case["elapsed"]
        ours.append(logging.message())
    assert ours == real["spec_log"]
    assert real["spec_log"][0].startswith("SpecDecoding metrics: Mean acceptance length: ")


def test_the_stats_interval_is_vllms(vllm_src, standin):
    envs = ast.unparse(source_tree(vllm_src, "envs.py"))
    assert "'VLLM_LOG_STATS_INTERVAL': lambda: val if (val := float(os.getenv('VLLM_LOG_STATS_INTERVAL', '10.'))) > 0.0 else 10.0" in envs
    interval = standin.metrics.log_stats_interval
    assert (interval({}), interval({"VLLM_LOG_STATS_INTERVAL": "2"}), interval({"VLLM_LOG_STATS_INTERVAL": "0"})) \
        == (10.0, 2.0, 10.0)
    loop = function(source_tree(vllm_src, "entrypoints/serve/utils/server_utils.py"), "_force_log")
    assert "await asyncio.sleep(envs.VLLM_LOG_STATS_INTERVAL)" in ast.unparse(loop)


# -- the environment ---------------------------------------------------------

def test_the_ranks_get_the_driver_environment_as_vllm_gives_it(real, standin):
    ex = standin.executor
    assert real["constants"]["worker_specific"] == sorted(ex.WORKER_SPECIFIC_ENV_VARS)
    for case, theirs in zip(ENV, real["env"]):
        with tempfile.TemporaryDirectory() as root:
            environ = {k: v.replace("@ROOT@", root) for k, v in case["environ"].items()}
            if case["non_carry_over"] is not None:
                config = environ.get("VLLM_CONFIG_ROOT") or os.path.join(
                    environ.get("XDG_CONFIG_HOME") or os.path.join(environ["HOME"], ".config"), "vllm")
                os.makedirs(config)
                with open(os.path.join(config, "ray_non_carry_over_env_vars.json"), "w") as handle:
                    handle.write(case["non_carry_over"])
            warnings = []
            saved_home = os.environ.get("HOME")
            os.environ["HOME"] = environ["HOME"]  # os.path.expanduser("~"), as in vLLM's process
            try:
                result = ex.get_driver_env_vars(
                    environ=environ, non_carry_over=ex.non_carry_over_env_vars(environ, warnings.append))
            finally:
                os.environ["HOME"] = saved_home
            assert {k: v.replace(root, "@ROOT@") for k, v in result.items()} == theirs["result"], case
            assert [w.replace(root, "@ROOT@") for w in warnings] == theirs["warnings"], case
    assert "NCCL_IB_GID_INDEX" not in real["env"][0]["result"] and "VLLM_HOST_IP" not in real["env"][3]["result"]
    assert real["env"][3]["result"]["VLLM_API_KEY"] == "k"  # everything else goes


def test_a_rank_keeps_its_nodes_values_and_takes_the_rest_from_the_driver(real, standin):
    for case, theirs in zip(INIT_ENV, real["init_env"]):
        environ = dict(case["node"])
        assert standin.executor.apply_worker_env(environ, case["env_vars"], case["driver_env_vars"]) == theirs
    assert real["init_env"][0]["NCCL_IB_GID_INDEX"] == "5" and real["init_env"][0]["NCCL_IB_HCA"] == "rocep1s0f1"


def test_a_rank_drops_nccl_async_error_handling_as_vllms_worker_does(vllm_src, standin):
    init = ast.unparse(function(source_tree(vllm_src, "v1/worker/gpu_worker.py"), "init_device"))
    assert "os.environ.pop('NCCL_ASYNC_ERROR_HANDLING', None)" in init
    ours = ast.unparse(function(ast.parse(open(standin.executor.__file__).read()), "initialize_worker"))
    assert "os.environ.pop('NCCL_ASYNC_ERROR_HANDLING', None)" in ours


# -- the memory check --------------------------------------------------------

def test_the_memory_check_is_vllms(real, standin):
    gpu = standin.gpu
    assert real["constants"]["gpu_memory_utilization"] == gpu.DEFAULT_GPU_MEMORY_UTILIZATION
    assert [gpu.format_gib(v) for v in [0, 1, 5368709120, gpu.DEFAULT_TOTAL_BYTES, 123456789012, GiB - 1]] \
        == real["format_gib"]
    for case, theirs in zip(memory_cases(gpu), real["memory"]):
        snap = {"device": gpu.DEVICE, "total_memory": case["total"], "free_memory": case["free"]}
        try:
            ours = {"requested": gpu.request_memory(snap, case["util"])}
        except ValueError as exc:
            ours = {"error": str(exc)}
        assert ours == theirs, case
    # the stand-in GPU's defaults: the collection's 0.85 passes, vLLM's 0.92 does not
    assert "requested" in real["memory"][0] and real["memory"][2]["error"].startswith(
        "Free memory on device cuda:0 (110.37/121.69 GiB) on startup is less than desired GPU memory utilization "
        "(0.92, ")


def test_vllm_checks_every_rank_with_the_available_memory_of_an_integrated_gpu(vllm_src):
    measure = function(source_tree(vllm_src, "utils/mem_utils.py"), "measure")
    branch = [n for n in ast.walk(measure) if isinstance(n, ast.If) and "is_integrated_gpu" in ast.unparse(n.test)]
    assert [ast.unparse(s) for s in branch[0].body] == ["self.free_memory = psutil.virtual_memory().available"]
    init = function(source_tree(vllm_src, "v1/worker/gpu_worker.py"), "init_device")
    parents = {child: node for node in ast.walk(init) for child in ast.iter_child_nodes(node)}
    calls = [n for n in ast.walk(init) if isinstance(n, ast.Call) and ast.unparse(n.func) == "request_memory"]
    assert len(calls) == 1
    node = calls[0]
    while node in parents:  # whatever --kv-cache-memory-bytes says
        node = parents[node]
        if isinstance(node, ast.If):
            assert "kv_cache_memory" not in ast.unparse(node.test), ast.unparse(node.test)


# -- a dead worker: 503, the watchdog, status 0 -------------------------------

def test_a_dead_engine_answers_as_vllm_and_the_server_returns(real, vllm_src, standin):
    cli = standin.cli
    dead = real["engine_dead"]
    assert (cli.ENGINE_DEAD_RESPONSE[0], cli.ENGINE_DEAD_RESPONSE[1]) == (dead["status"], dead["body"])
    assert cli.ENGINE_DEAD_MESSAGE == real["engine_dead"]["message"]
    health = ast.unparse(function(source_tree(vllm_src, "entrypoints/serve/instrumentator/health.py"), "health"))
    assert "except EngineDeadError:\n        return Response(status_code=503)" in health
    launcher = source_tree(vllm_src, "entrypoints/launcher.py")
    watchdog = ast.unparse(function(launcher, "watchdog_loop"))
    assert "VLLM_WATCHDOG_TIME_S = 5.0" in watchdog and cli.WATCHDOG_TIME_S == 5.0
    terminate = function(launcher, "terminate_if_errored")
    text = ast.unparse(terminate)
    assert "engine_errored = engine.errored and (not engine.is_running)" in text
    assert "if not envs.VLLM_KEEP_ALIVE_ON_ENGINE_DEATH and engine_errored:\n        server.should_exit = True" in text
    # the server is told to exit; nothing raises or exits with a status
    assert not [n for n in ast.walk(terminate) if isinstance(n, ast.Raise)
                or (isinstance(n, ast.Call) and "exit" in ast.unparse(n.func))]
    # serve_http returns once the server task ends; `vllm serve` runs it and returns
    serve_http = ast.unparse(function(launcher, "serve_http"))
    assert "await server_task\n        return dummy_shutdown()" in serve_http
    cmd = ast.unparse(function(source_tree(vllm_src, "entrypoints/cli/serve.py"), "cmd"))
    assert cmd.rstrip().endswith("uvloop.run(run_server(args))")
    main = function(source_tree(vllm_src, "entrypoints/cli/main.py"), "main")
    dispatch = [n for n in ast.walk(main) if isinstance(n, ast.If) and ast.unparse(n.test) == "hasattr(args, 'dispatch_function')"]
    assert [ast.unparse(s) for s in dispatch[0].body] == ["args.dispatch_function(args)"]
    # ... in the last statement of the branch that runs it, the last of main()
    branch = main.body[-1]
    assert isinstance(branch, ast.If) and branch.orelse[-1] is dispatch[0]
    # the engine: the executor's failure raises "Executor failed." in the busy loop
    core = source_tree(vllm_src, "v1/engine/core.py")
    raises = [ast.unparse(n) for n in ast.walk(core) if isinstance(n, ast.Raise) and n.exc is not None]
    assert "raise RuntimeError('Executor failed.')" in raises and cli.EXECUTOR_FAILED == "Executor failed."


def test_the_uvicorn_lines_are_uvicorns(vllm_src, standin):
    uvicorn = os.path.join(os.path.dirname(vllm_src), "uvicorn")
    text = open(os.path.join(uvicorn, "server.py")).read() + open(os.path.join(uvicorn, "lifespan", "on.py")).read()
    for line in standin.cli.UVICORN_SHUTDOWN:
        message = line.split("INFO:     ", 1)[1]
        assert '"%s"' % message in text, message


def test_the_engine_init_failure_is_vllms(vllm_src, standin):
    utils = ast.unparse(source_tree(vllm_src, "v1/engine/utils.py"))
    assert "'Engine core initialization failed. ' 'See root cause above. ' f'Failed core proc(s): {finished}'" \
        in utils or "f'Engine core initialization failed. See root cause above. Failed core proc(s): {finished}'" \
        in utils
    assert standin.cli.ENGINE_INIT_FAILED.startswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): ")
