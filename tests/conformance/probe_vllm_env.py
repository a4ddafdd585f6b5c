"""Run inside the conformance venv: what vLLM 0.25.1 gives each TP rank of the vllm serve process's environment.

stdin: JSON {"serve_env": {...}, "raylets": {name: {...}}}: the environment of
the vllm serve unit and of each node's raylet (a Ray worker actor inherits
its raylet's).
stdout (last line): JSON {"worker_specific": [...], "driver_env_vars": {...},
"ranks": {name: {...}}}.

Runs vLLM's own code: get_driver_env_vars(worker_specific_vars=
WORKER_SPECIFIC_ENV_VARS), as RayExecutorV2 calls it, with os.environ set to
the serve environment; then, with os.environ set to each raylet's,
RayWorkerProc.initialize_worker with those variables, stopped before the
worker itself starts (WorkerProc.__init__ is replaced by a no-op). Needs
VLLM_CONFIG_ROOT pointing at a directory without
ray_non_carry_over_env_vars.json, as on a Spark.
"""

import os

import _probe


def report(request):
    from vllm.v1.executor.ray_env_utils import get_driver_env_vars
    from vllm.v1.executor.ray_executor_v2 import RayWorkerProc
    from vllm.v1.executor.ray_utils import WORKER_SPECIFIC_ENV_VARS

    base = RayWorkerProc.__mro__[1]
    base.__init__ = lambda self, **kwargs: None  # the worker itself (device, model) is not started

    os.environ.clear()
    os.environ.update(request["serve_env"])
    driver = get_driver_env_vars(worker_specific_vars=WORKER_SPECIFIC_ENV_VARS)
    ranks = {}
    for name, raylet_env in request["raylets"].items():
        os.environ.clear()
        os.environ.update(raylet_env)
        proc = RayWorkerProc.__new__(RayWorkerProc)
        proc._init_kwargs = {}
        proc.initialize_worker(0, {}, driver, None)
        ranks[name] = dict(os.environ)
    return {"worker_specific": sorted(WORKER_SPECIFIC_ENV_VARS), "driver_env_vars": driver, "ranks": ranks}


if __name__ == "__main__":
    _probe.run(report)
