"""vLLM 0.25.1's Ray executor, memory check and spec-decode log line, run in the conformance venv
(test_vllm_ray_executor.py compares the stand-in with each answer).

Reads a JSON request on stdin and prints one JSON report line. Every figure
comes from vLLM's own functions, run with Ray, the clock and the platform
replaced where they would need a cluster or a GPU:
  constants  - PG_WAIT_TIMEOUT, WORKER_SPECIFIC_ENV_VARS, CUDA's
               ray_noset_device_env_vars, CacheConfig's default
               gpu_memory_utilization;
  wait       - ray_utils._wait_until_pg_ready on a fake clock: each case
               {specs, ready_at (seconds, or null for never)} -> the lines it
               logged, the ValueError it raised (or null), the clock at its end;
  sort       - ray_utils.get_bundles_sorted_by_node for each case {specs,
               bundle_to_node, nodes {id: ip}, driver};
  names      - ray_utils.build_actor_name for each [instance, rank, tp, pp, pcp];
  env        - ray_env_utils.get_driver_env_vars for each case {environ,
               non_carry_over (file content as text, or null: no file)}: the
               variables, and the warnings vLLM logged;
  init_env   - RayWorkerProc.initialize_worker's environment for each case
               {node, env_vars, driver_env_vars} (WorkerProc.__init__ skipped);
  memory     - v1/worker/utils.py request_memory for each case {total, free,
               util}: the requested bytes or the ValueError's message;
  format_gib - mem_utils.format_gib of each value;
  kv_line    - the message gpu_worker.determine_available_memory builds with
               kv_cache_memory_bytes, evaluated from its source for each
               [free, kv_cache_memory_bytes];
  spec_log   - SpecDecodingLogging fed SpecDecodingStats per case {k, steps
               (accepted per draft), elapsed}: the message it logs (null: none);
  engine_dead - create_error_response(EngineDeadError()): body and status.
"""

import ast
import os
import tempfile
import traceback
import types

import _probe


class Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now

    def monotonic(self):
        return self.now


class Logger:
    def __init__(self):
        self.lines = []

    def _log(self, fmt, *args, **_kw):
        self.lines.append(fmt % args if args else fmt)

    info = warning = error = debug = exception = _log


def stage_constants():
    import vllm.platforms
    from vllm.config.cache import CacheConfig
    from vllm.v1.executor import ray_utils
    # platforms/cuda.py needs libcuda to import: its class attribute, read from its source.
    path = os.path.join(os.path.dirname(vllm.platforms.__file__), "cuda.py")
    noset = next(ast.literal_eval(node.value) for node in ast.walk(ast.parse(open(path).read()))
                 if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "ray_noset_device_env_vars")
    return {"pg_wait_timeout": ray_utils.PG_WAIT_TIMEOUT,
            "worker_specific": sorted(ray_utils.WORKER_SPECIFIC_ENV_VARS),
            "noset": noset,
            "gpu_memory_utilization": CacheConfig().gpu_memory_utilization}


def stage_wait(cases):
    import ray
    from vllm.v1.executor import ray_utils
    out = []
    for case in cases:
        clock, logger = Clock(), Logger()
        start = clock.now
        ready_at = None if case["ready_at"] is None else start + case["ready_at"]

        def ready():
            return ready_at is not None and clock.now >= ready_at

        def wait(refs, timeout):
            if ready_at is not None and clock.now + timeout >= ready_at:
                clock.now = max(clock.now, ready_at)
                return list(refs), []
            clock.now += timeout
            return [], list(refs)

        def get(ref, timeout=None):
            if not ready():
                raise ray.exceptions.GetTimeoutError("not ready")

        group = types.SimpleNamespace(bundle_specs=case["specs"], ready=lambda: "ref")
        saved = ray_utils.ray, ray_utils.time, ray_utils.logger
        ray_utils.ray = types.SimpleNamespace(wait=wait, get=get, exceptions=ray.exceptions)
        ray_utils.time = clock
        ray_utils.logger = logger
        error = None
        try:
            ray_utils._wait_until_pg_ready(group)  # pylint: disable=protected-access
        except ValueError as exc:
            error = str(exc)
        finally:
            ray_utils.ray, ray_utils.time, ray_utils.logger = saved
        out.append({"lines": logger.lines, "error": error, "elapsed": clock.now - start})
    return out


def stage_sort(cases):
    from vllm.v1.executor import ray_utils
    out = []
    for case in cases:
        group = types.SimpleNamespace(bundle_specs=case["specs"])
        table = {"bundles_to_node_id": {int(k): v for k, v in case["bundle_to_node"].items()}}
        saved = ray_utils.ray, ray_utils.placement_group_table, ray_utils.current_platform
        ray_utils.ray = types.SimpleNamespace(
            nodes=lambda: [{"NodeID": n, "NodeManagerAddress": ip, "Alive": True} for n, ip in case["nodes"].items()],
            get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: case["driver"]))
        ray_utils.placement_group_table = lambda pg: table
        ray_utils.current_platform = types.SimpleNamespace(ray_device_key="GPU", device_name="cuda")
        try:
            out.append([list(item) for item in ray_utils.get_bundles_sorted_by_node(group)])
        finally:
            ray_utils.ray, ray_utils.placement_group_table, ray_utils.current_platform = saved
    return out


def stage_names(cases):
    from vllm.v1.executor import ray_utils
    return [ray_utils.build_actor_name(*case) for case in cases]


def stage_env(cases):
    import importlib

    from vllm.ray import ray_env
    from vllm.v1.executor import ray_env_utils, ray_utils
    out = []
    saved = dict(os.environ)
    for case in cases:
        with tempfile.TemporaryDirectory() as root:
            environ = {k: v.replace("@ROOT@", root) for k, v in case["environ"].items()}
            if case["non_carry_over"] is not None:
                config = environ.get("VLLM_CONFIG_ROOT") or os.path.join(
                    environ.get("XDG_CONFIG_HOME") or os.path.join(environ["HOME"], ".config"), "vllm")
                os.makedirs(config, exist_ok=True)
                with open(os.path.join(config, "ray_non_carry_over_env_vars.json"), "w") as handle:
                    handle.write(case["non_carry_over"])
            os.environ.clear()
            os.environ.update(environ)
            logger = Logger()
            import vllm.logger
            real_init = vllm.logger.init_logger
            vllm.logger.init_logger = lambda name: logger
            try:
                importlib.reload(ray_env)
                importlib.reload(ray_env_utils)
            finally:
                vllm.logger.init_logger = real_init
            result = ray_env_utils.get_driver_env_vars(worker_specific_vars=ray_utils.WORKER_SPECIFIC_ENV_VARS)
            out.append({"result": {k: v.replace(root, "@ROOT@") for k, v in result.items()},
                        "warnings": [line.replace(root, "@ROOT@") for line in logger.lines]})
            os.environ.clear()
            os.environ.update(saved)
    return out


def stage_init_env(cases):
    from vllm.v1.executor import multiproc_executor, ray_executor_v2
    saved_init = multiproc_executor.WorkerProc.__init__
    multiproc_executor.WorkerProc.__init__ = lambda self, **kwargs: None
    saved = dict(os.environ)
    out = []
    try:
        for case in cases:
            worker = object.__new__(ray_executor_v2.RayWorkerProc)
            worker._init_kwargs = {}  # pylint: disable=protected-access
            os.environ.clear()
            os.environ.update(case["node"])
            worker.initialize_worker(0, dict(case["env_vars"]), dict(case["driver_env_vars"]))
            out.append(dict(os.environ))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        multiproc_executor.WorkerProc.__init__ = saved_init
    return out


def stage_memory(cases):
    from vllm.v1.worker.utils import request_memory
    out = []
    for case in cases:
        snap = types.SimpleNamespace(total_memory=case["total"], free_memory=case["free"], device_="cuda:0")
        try:
            out.append({"requested": request_memory(snap, types.SimpleNamespace(gpu_memory_utilization=case["util"]))})
        except ValueError as exc:
            out.append({"error": str(exc)})
    return out


def stage_format_gib(values):
    from vllm.utils.mem_utils import format_gib
    return [format_gib(v) for v in values]


def stage_kv_line(cases):
    import vllm.v1.worker.gpu_worker as gw
    tree = ast.parse(open(gw.__file__).read())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "determine_available_memory")
    msg = next(n for n in ast.walk(func) if isinstance(n, ast.Assign)
               and any(getattr(t, "id", None) == "msg" for t in n.targets))
    code = compile(ast.Expression(msg.value), gw.__file__, "eval")
    out = []
    for free, kv_bytes in cases:
        scope = {"self": types.SimpleNamespace(init_snapshot=types.SimpleNamespace(free_memory=free)),
                 "kv_cache_memory_bytes": kv_bytes, "format_gib": gw.format_gib}
        out.append(eval(code, vars(gw), scope))  # pylint: disable=eval-used
    return out


def stage_spec_log(cases):
    from vllm.v1.spec_decode import metrics
    out = []
    for case in cases:
        clock, logger = Clock(), Logger()
        saved = metrics.time
        metrics.time = clock
        try:
            logging = metrics.SpecDecodingLogging()
            for accepted in case["steps"]:
                stats = metrics.SpecDecodingStats.new(case["k"])
                stats.observe_draft(case["k"], accepted)
                logging.observe(stats)
            clock.now += case["elapsed"]
            logging.log(log_fn=logger.info)
        finally:
            metrics.time = saved
        out.append(logger.lines[0] if logger.lines else None)
    return out


def stage_engine_dead():
    from vllm.entrypoints.serve.utils.error_response import create_error_response
    from vllm.v1.engine.exceptions import EngineDeadError
    err = create_error_response(EngineDeadError())
    return {"body": err.model_dump(), "status": int(err.error.code), "message": EngineDeadError().args[0]}


def run_stages(request):
    report = {}
    stages = [("constants", stage_constants, ()), ("wait", stage_wait, ("wait",)), ("sort", stage_sort, ("sort",)),
              ("names", stage_names, ("names",)), ("env", stage_env, ("env",)),
              ("init_env", stage_init_env, ("init_env",)), ("memory", stage_memory, ("memory",)),
              ("format_gib", stage_format_gib, ("format_gib",)), ("kv_line", stage_kv_line, ("kv_line",)),
              ("spec_log", stage_spec_log, ("spec_log",)), ("engine_dead", stage_engine_dead, ())]
    for name, func, keys in stages:
        try:
            report[name] = func(*(request[k] for k in keys))
        except Exception:  # pylint: disable=broad-except
            report[name + "_error"] = traceback.format_exc()
    return report


if __name__ == "__main__":
    _probe.run(run_stages)
