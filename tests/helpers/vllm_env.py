"""The environment a TP rank of vLLM 0.25.1 ends up with on a node.

RayExecutorV2 (vllm/v1/executor/ray_executor_v2.py) takes
``get_driver_env_vars(worker_specific_vars=WORKER_SPECIFIC_ENV_VARS)``
(vllm/v1/executor/ray_env_utils.py: every variable of the ``vllm serve``
process but those and RAY_NON_CARRY_OVER_ENV_VARS, empty unless
~/.config/vllm/ray_non_carry_over_env_vars.json lists some) and each worker
actor applies them in ``RayWorkerProc.initialize_worker`` with
``os.environ.setdefault``. The actor is a Ray worker process, started by its
node's raylet with the raylet's environment. So a rank keeps every variable
its raylet sets and takes every other one from the head's vllm serve.

tests/conformance/test_vllm_rank_environment.py checks these names and that
logic against vLLM's own code.
"""

# vllm/v1/executor/ray_utils.py, WORKER_SPECIFIC_ENV_VARS (vLLM 0.25.1).
WORKER_SPECIFIC_ENV_VARS = frozenset({
    "VLLM_HOST_IP", "VLLM_HOST_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
})


def driver_env_vars(serve_env, non_carry_over=()):
    """What vLLM passes from the vllm serve process to its worker actors."""
    exclude = WORKER_SPECIFIC_ENV_VARS | frozenset(non_carry_over)
    return dict((key, str(value)) for key, value in serve_env.items() if key not in exclude)


def rank_environment(serve_env, raylet_env, non_carry_over=()):
    """A rank's environment on the node whose raylet has ``raylet_env``."""
    env = dict((key, str(value)) for key, value in raylet_env.items())
    for key, value in driver_env_vars(serve_env, non_carry_over).items():
        env.setdefault(key, value)
    return env
