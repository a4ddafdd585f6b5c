"""The stand-in's Ray executor: vLLM 0.25.1's RayExecutorV2 where it places, fills in and fails.

vLLM 0.25.1 runs its TP ranks under Ray with RayExecutorV2 (the default:
VLLM_USE_RAY_V2_EXECUTOR_BACKEND=1). What the stand-in does as it does, each
compared with vLLM's own code by tests/conformance/test_vllm_ray_executor.py:

* placement (v1/executor/ray_utils.py initialize_ray_cluster): one bundle
  {"GPU": 1.0} per rank, strategy PACK, no bundle pinned to the driver's
  node (require_gpu_on_driver=False); waits with ray.wait, 10 s first and
  doubling, logging "Waiting for creating a placement group of specs for N
  seconds ..." after each wait, and gives up after PG_WAIT_TIMEOUT (1800 s,
  a constant: no variable changes it) with vLLM's ValueError; then warns
  per node holding fewer bundles than the TP size (_verify_bundles);
* ranks (get_bundles_sorted_by_node): the GPU bundles sorted driver's node
  first, then by node id; rank i runs on the i-th;
* the workers: one actor of class RayWorkerProc per rank, named
  vllm_Worker_<instance>_TP<rank> (build_actor_name), num_cpus=0,
  num_gpus=1, in its bundle, with runtime_env env_vars
  RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1; each rank's process title is
  therefore ray::RayWorkerProc.run while it serves (Ray titles a process
  ray::<Class>.<method> while the method runs, and run() never returns);
* the environment (ray_env_utils.get_driver_env_vars, initialize_worker):
  every variable of the `vllm serve` process except WORKER_SPECIFIC_ENV_VARS
  and the names in $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json
  (~/.config/vllm by default; XDG_CONFIG_HOME moves it; a file that is not
  JSON counts as empty, with vLLM's warning) is set in each rank with
  os.environ.setdefault: a variable the rank's raylet already has keeps the
  node's value, any other arrives with the head's;
* the GPU: each rank pops NCCL_ASYNC_ERROR_HANDLING, makes its "CUDA context"
  (a shared flock on the stand-in device file, what the nvidia-smi stand-in
  reports) and runs vLLM's memory check (vllm.v1.worker.gpu_worker here);
* the worker monitor (start_worker_monitor): a thread that ray.wait()s on the
  ranks' run() refs with a 5 s timeout; when one ends (its actor died: a
  raylet killed, a node gone), it logs "RayWorkerProc rank=[...] died
  unexpectedly, shutting down executor.", kills every actor and calls the
  engine's failure callback.

Stand-in-only aid: each rank writes <state dir>/rank-<rank>.json (the state dir
is LAGUNA_STANDIN_STATE_DIR as the rank sees it, by default
/tmp/laguna-standin-vllm; mode 0700, the files 0600) with its rank, node and
pid and the environment it ended up with (values of names that look secret
replaced by a digest), so that a test can read what each rank got. Real vLLM
writes no such file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
import weakref

from vllm.v1.worker import gpu_worker

PG_WAIT_TIMEOUT = 1800
# Env vars that are worker-specific and must NOT be copied from the driver to Ray workers.
WORKER_SPECIFIC_ENV_VARS = {
    "VLLM_HOST_IP",
    "VLLM_HOST_PORT",
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "LOCAL_RANK",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
}
# current_platform.ray_noset_device_env_vars of CUDA, set "1" in the actors' runtime_env.
RAY_NOSET_DEVICE_ENV_VARS = ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]
DEVICE_KEY = "GPU"
MONITOR_WAIT_S = 5.0
STATE_DIR = "/tmp/laguna-standin-vllm"
# The "died unexpectedly" line's logger call, as in ray_executor_v2.py.
WORKER_DIED = "RayWorkerProc rank=%s died unexpectedly, shutting down executor."
PG_WAITING = ("Waiting for creating a placement group of specs for "
              "%d seconds. specs=%s. Check `ray status` and "
              "`ray list nodes` to see if you have enough resources,"
              " and make sure the IP addresses used by ray cluster"
              " are the same as VLLM_HOST_IP environment variable"
              " specified in each node if you are running on a multi-node.")
SECRET_HINTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
# Where vLLM logs each line the stand-in writes: "<file>:<line of the logger call>".
LOG_SITES = {
    "pg_waiting": "ray_utils.py:467",
    "pg_creating": "ray_utils.py:624",
    "pg_short": "ray_utils.py:630",
    "pg_spread": "ray_utils.py:319",
    "non_carry_over_unparsed": "ray_env.py:25",
    "monitor_error": "ray_executor_v2.py:502",
    "worker_died": "ray_executor_v2.py:514",
    "kill_failed": "ray_executor_v2.py:566",
}


def _log(level, msg, where):
    sys.stderr.write("%s %s [%s] %s\n" % (level, time.strftime("%m-%d %H:%M:%S"), where, msg))
    sys.stderr.flush()


def log_info(msg, where):
    _log("INFO", msg, where)


def log_warning(msg, where):
    _log("WARNING", msg, where)


def log_error(msg, where):
    _log("ERROR", msg, where)


# -- placement ---------------------------------------------------------------

def placement_group_specs(world_size, device_key=DEVICE_KEY):
    """initialize_ray_cluster's bundles: one device per rank (nothing pins the driver's node)."""
    return [{device_key: 1.0} for _rank in range(world_size)]


def pg_timeout_error(specs, timeout=PG_WAIT_TIMEOUT):
    """_wait_until_pg_ready's ValueError when the group is not ready in time."""
    total_gpu_required = sum(spec.get("GPU", 0) for spec in specs)
    if total_gpu_required > 1:
        return ValueError(
            f"Cannot provide a placement group requiring "
            f"{total_gpu_required} GPUs "
            f"(placement_group_specs={specs}) within "
            f"{timeout} seconds.\n"
            f"Tensor parallel size may exceed available GPUs in your "
            f"cluster. Check resources with `ray status` and "
            f"`ray list nodes`.\n"
            f"If running on K8s with limited GPUs, consider reducing "
            f"--tensor-parallel-size to match available GPU resources."
        )
    placement_group_specs = specs  # the name vLLM's f-string prints
    return ValueError(
        "Cannot provide a placement group of "
        f"{placement_group_specs=} within "
        f"{timeout} seconds. See "
        "`ray status` and `ray list nodes` to make sure the cluster "
        "has enough resources."
    )


def wait_until_pg_ready(specs, wait, ready, now=time.time, log=None, timeout=PG_WAIT_TIMEOUT):
    """ray_utils._wait_until_pg_ready, with Ray and the clock passed in.

    wait(seconds) -> whether the group became ready within that many seconds;
    ready() -> whether it is ready now; now() -> seconds. Waits 10 s, then 20,
    40, ... logging after each wait, until ready or `timeout` seconds passed,
    then raises pg_timeout_error() unless ready().
    """
    log = log or (lambda msg: log_info(msg, LOG_SITES["pg_waiting"]))
    start = now()
    wait_interval = 10
    while now() - start < timeout:
        if wait(wait_interval):
            break
        wait_interval *= 2
        log(PG_WAITING % (int(now() - start), specs))
    if not ready():
        raise pg_timeout_error(specs, timeout)


def sort_bundles_driver_first(bundle_specs, bundle_to_node, node_id_to_ip, driver_node, device_key=DEVICE_KEY):
    """get_bundles_sorted_by_node: [(bundle index, node id, node ip)] of the device bundles,
    the driver's node first, then by node id (a stable sort: bundle order within a node)."""
    found = []
    for bundle_idx, bundle in enumerate(bundle_specs):
        if bundle.get(device_key):
            node_id = bundle_to_node.get(bundle_idx)
            found.append((bundle_idx, node_id, node_id_to_ip[node_id]))
    found.sort(key=lambda item: (0 if item[1] == driver_node else 1, item[1]))
    return found


def verify_bundles_warnings(bundle_to_node, bundles, tensor_parallel_size, device_str=DEVICE_KEY):
    """_verify_bundles' warnings: a node holding fewer bundles than the TP size."""
    per_node = {}
    for bundle_idx, node_id in bundle_to_node.items():
        per_node.setdefault(node_id, []).append(bundles[bundle_idx])
    return [("tensor_parallel_size=%d "
             "is bigger than a reserved number of %ss (%d "
             "%ss) in a node %s. Tensor parallel workers can be "
             "spread out to 2+ nodes which can degrade the performance "
             "unless you have fast interconnect across nodes, like "
             "Infiniband. To resolve this issue, make sure you have more "
             "than %d GPUs available at each node.")
            % (tensor_parallel_size, device_str, len(node_bundles), device_str, node_id, tensor_parallel_size)
            for node_id, node_bundles in per_node.items() if len(node_bundles) < tensor_parallel_size]


def build_actor_name(instance_id, rank, tp_size, pp_size, pcp_size=1):
    """ray_utils.build_actor_name."""
    name = f"vllm_Worker_{instance_id}"
    if tp_size > 1:
        name += f"_TP{rank % tp_size}"
    if pp_size > 1:
        name += f"_PP{(rank // tp_size) % pp_size}"
    if pcp_size > 1:
        name += f"_PCP{rank // (tp_size * pp_size)}"
    return name


# -- environment -------------------------------------------------------------

def config_root(environ=None):
    """vllm.envs.VLLM_CONFIG_ROOT."""
    environ = os.environ if environ is None else environ
    config_home = environ.get("XDG_CONFIG_HOME", os.path.join(os.path.expanduser("~"), ".config"))
    return os.path.expanduser(environ.get("VLLM_CONFIG_ROOT", os.path.join(config_home, "vllm")))


def non_carry_over_env_vars(environ=None, warn=None):
    """vllm/ray/ray_env.py RAY_NON_CARRY_OVER_ENV_VARS: the names in
    <config root>/ray_non_carry_over_env_vars.json (none when it is absent;
    none, with a warning, when it is not JSON)."""
    path = os.path.join(config_root(environ), "ray_non_carry_over_env_vars.json")
    warn = warn or (lambda msg: log_warning(msg, LOG_SITES["non_carry_over_unparsed"]))
    try:
        if os.path.exists(path):
            with open(path) as handle:
                return set(json.load(handle))
        return set()
    except json.JSONDecodeError:
        warn("Failed to parse %s. Using an empty set for non-carry-over env vars." % path)
        return set()


def get_driver_env_vars(worker_specific_vars=None, environ=None, non_carry_over=None):
    """ray_env_utils.get_driver_env_vars: the driver's variables the ranks get (setdefault)."""
    environ = os.environ if environ is None else environ
    if worker_specific_vars is None:
        worker_specific_vars = WORKER_SPECIFIC_ENV_VARS
    if non_carry_over is None:
        non_carry_over = non_carry_over_env_vars(environ)
    exclude_vars = set(worker_specific_vars) | set(non_carry_over)
    return {key: value for key, value in environ.items() if key not in exclude_vars}


def apply_worker_env(environ, env_vars, driver_env_vars):
    """RayWorkerProc.initialize_worker: the driver's variables fill in, env_vars overwrite."""
    if driver_env_vars:
        for key, value in driver_env_vars.items():
            environ.setdefault(key, value)
    for key, value in env_vars.items():
        environ[key] = value
    return environ


def shown_environ(environ):
    """The environment for the rank's state file, secret-looking values replaced by a digest."""
    shown = {}
    for key, value in environ.items():
        if any(hint in key.upper() for hint in SECRET_HINTS):
            value = "<redacted sha256:%s>" % hashlib.sha256(value.encode()).hexdigest()[:12]
        shown[key] = value
    return shown


def write_state(state_dir, rank, record):
    """<state_dir>/rank-<rank>.json, written whole (a rename), mode 0600 in a 0700 directory."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rank-", dir=state_dir)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(state_dir, "rank-%d.json" % rank))
    return os.path.join(state_dir, "rank-%d.json" % rank)


# -- the rank ----------------------------------------------------------------

class RayWorkerProc:
    """One TP rank in a Ray actor (ray_executor_v2.RayWorkerProc): init, then run() until killed."""

    def __init__(self, rank, instance_id, actor_name, gpu_memory_utilization, is_driver_node=False):
        self.rank = rank
        self.instance_id = instance_id
        self.actor_name = actor_name
        self.gpu_memory_utilization = gpu_memory_utilization
        self.is_driver_node = is_driver_node
        self.local_rank = -1
        self.gpu = None
        self.stop = threading.Event()

    def get_node_and_physical_gpu_ids(self):
        import ray
        context = ray.get_runtime_context()
        return context.get_node_id(), [int(x) for x in context.get_accelerator_ids()[DEVICE_KEY]]

    def initialize_worker(self, local_rank, env_vars, driver_env_vars=None, assigned_physical_gpu_ids=None):
        """The environment, the GPU and the memory check; what the driver logs for this rank."""
        import fcntl
        import ray
        apply_worker_env(os.environ, env_vars, driver_env_vars)
        self.local_rank = local_rank
        # gpu_worker.init_device: "This env var set by Ray causes exceptions with graph building."
        os.environ.pop("NCCL_ASYNC_ERROR_HANDLING", None)
        device = gpu_worker.device_path()
        record = {"rank": self.rank, "local_rank": local_rank, "actor_name": self.actor_name,
                  "instance_id": self.instance_id, "pid": os.getpid(),
                  "node_id": ray.get_runtime_context().get_node_id(),
                  "node_ip": ray.util.get_node_ip_address(), "physical_gpu_ids": assigned_physical_gpu_ids,
                  "written_at": time.time(), "environ": shown_environ(os.environ)}
        state = write_state(os.environ.get("LAGUNA_STANDIN_STATE_DIR", STATE_DIR), self.rank, record)
        if os.path.exists(device):  # its CUDA context
            self.gpu = open(device, "rb")
            fcntl.flock(self.gpu, fcntl.LOCK_SH)
        snap = gpu_worker.snapshot(device)
        gpu_worker.request_memory(snap, self.gpu_memory_utilization)
        return {"pid": os.getpid(), "ip": record["node_ip"], "holds_gpu": self.gpu is not None,
                "free_memory": snap["free_memory"], "total_memory": snap["total_memory"], "state": state}

    def wait_for_init(self):
        return {"status": "READY"}

    def run(self):
        """The worker's busy loop: returns only when the actor is killed (or stopped by a test)."""
        self.stop.wait()

    def ping(self):
        return os.getpid()


# -- the executor ------------------------------------------------------------

class RayExecutorV2:
    """Places the ranks, starts them, watches them; shutdown() kills them."""

    def __init__(self, world_size, tensor_parallel_size, pipeline_parallel_size, gpu_memory_utilization,
                 instance_id=None, log_prefix=None):
        self.world_size = world_size
        self.tp_size = tensor_parallel_size
        self.pp_size = pipeline_parallel_size
        self.gpu_memory_utilization = gpu_memory_utilization
        self.instance_id = instance_id or uuid.uuid4().hex[:5]
        self.handles = []
        self.ranks = []
        self.is_failed = False
        self.failure_callback = None
        self.shutting_down = False
        self.shutdown_lock = threading.Lock()
        self.placement_group = None
        self._monitor_thread = None

    def initialize_ray_cluster(self):
        import ray
        from ray.util.placement_group import placement_group
        if os.environ.get("RAY_USAGE_STATS_ENABLED", "0") != "1":
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
        log_info("No current placement group found. Creating a new placement group.", LOG_SITES["pg_creating"])
        if self.world_size > ray.cluster_resources().get(DEVICE_KEY, 0):
            log_warning("The number of required %ss exceeds the total number of available %ss in the "
                        "placement group." % (DEVICE_KEY, DEVICE_KEY), LOG_SITES["pg_short"])
        specs = placement_group_specs(self.world_size)
        group = placement_group(specs, strategy="PACK")
        ready_ref = group.ready()
        wait_until_pg_ready(group.bundle_specs,
                            lambda seconds: bool(ray.wait([ready_ref], timeout=seconds)[0]),
                            lambda: bool(ray.wait([ready_ref], timeout=0)[0]))
        table = ray.util.placement_group_table(group)
        for warning in verify_bundles_warnings(table["bundles_to_node_id"], table["bundles"], self.tp_size):
            log_warning(warning, LOG_SITES["pg_spread"])
        self.placement_group = group
        return group

    def start(self):
        """Steps 1-10 of RayExecutorV2._init_executor, then the worker monitor; per rank what it said."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        group = self.initialize_ray_cluster()
        table = ray.util.placement_group_table(group)
        node_id_to_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        driver_node = ray.get_runtime_context().get_node_id()
        bundles = sort_bundles_driver_first(group.bundle_specs, table["bundles_to_node_id"], node_id_to_ip,
                                            driver_node)
        driver_env_vars = get_driver_env_vars()
        runtime_env = {"env_vars": {name: "1" for name in RAY_NOSET_DEVICE_ENV_VARS}}
        for rank, (bundle_idx, node_id, _ip) in enumerate(bundles):
            name = build_actor_name(self.instance_id, rank, self.tp_size, self.pp_size)
            actor = ray.remote(RayWorkerProc).options(
                name=name, num_cpus=0, num_gpus=1, runtime_env=runtime_env,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=bundle_idx),
            ).remote(rank, self.instance_id, name, self.gpu_memory_utilization, node_id == driver_node)
            self.handles.append({"actor": actor, "rank": rank, "node_id": node_id, "run_ref": None})
        located = ray.get([h["actor"].get_node_and_physical_gpu_ids.remote() for h in self.handles])
        node_workers, node_gpus = {}, {}
        for i, (node_id, gpu_ids) in enumerate(located):
            node_workers.setdefault(node_id, []).append(i)
            node_gpus.setdefault(node_id, []).extend(gpu_ids)
        refs = []
        for i, (node_id, _gpu_ids) in enumerate(located):
            local_rank = node_workers[node_id].index(i)
            refs.append(self.handles[i]["actor"].initialize_worker.remote(
                local_rank, {}, driver_env_vars, assigned_physical_gpu_ids=sorted(node_gpus[node_id])))
        self.ranks = ray.get(refs)
        ray.get([h["actor"].wait_for_init.remote() for h in self.handles])
        for handle in self.handles:
            handle["run_ref"] = handle["actor"].run.remote()
        self.start_worker_monitor()
        return self.ranks

    def register_failure_callback(self, callback):
        if self.is_failed:
            callback()
        else:
            self.failure_callback = callback

    def start_worker_monitor(self):
        import ray
        run_refs = [h["run_ref"] for h in self.handles if h["run_ref"] is not None]
        if not run_refs:
            raise RuntimeError("Ray workers have not started successfully.")
        self_ref = weakref.ref(self)
        ref_to_rank = {h["run_ref"]: h["rank"] for h in self.handles if h["run_ref"] is not None}

        def should_stop():
            executor = self_ref()
            return not executor or executor.shutting_down

        def monitor_workers():
            while not should_stop() and ray.is_initialized():
                try:
                    done, _pending = ray.wait(run_refs, num_returns=1, timeout=MONITOR_WAIT_S)
                except Exception:  # pylint: disable=broad-except
                    log_error("RayWorkerMonitor: unexpected error, exiting monitor thread",
                              LOG_SITES["monitor_error"])
                    return
                if not done or should_stop():
                    continue
                dead_ranks = [ref_to_rank[r] for r in done]
                executor = self_ref()
                if not executor:
                    return
                executor.is_failed = True
                log_error(WORKER_DIED % dead_ranks, LOG_SITES["worker_died"])
                executor.shutdown()
                if executor.failure_callback is not None:
                    callback = executor.failure_callback
                    executor.failure_callback = None
                    callback()
                return

        self._monitor_thread = threading.Thread(target=monitor_workers, daemon=True, name="RayWorkerMonitor")
        self._monitor_thread.start()

    def shutdown(self):
        import ray
        with self.shutdown_lock:
            if self.shutting_down:
                return
            self.shutting_down = True
        monitor = self._monitor_thread
        if monitor is not None and monitor.is_alive() and threading.current_thread() is not monitor:
            monitor.join(timeout=10)
        for handle in self.handles:
            try:
                ray.kill(handle["actor"])
            except Exception:  # pylint: disable=broad-except
                log_error("Failed to kill actor rank=%d" % handle["rank"], LOG_SITES["kill_failed"])
