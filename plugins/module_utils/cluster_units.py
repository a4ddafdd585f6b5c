# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What the raylets and vllm serve run, and when a run restarts them.

The decisions of the fabric_env, ray_cluster and vllm_serve roles, called
through the collection's filters (plugins/filter): each role's render task
passes its variables as one dict and gets the command line, environment and
unit properties back; the main tasks ask whether a service is started or
restarted.

The environment rule. vLLM 0.25.1's Ray executor (RayExecutorV2) gives each
of its worker actors every variable of the ``vllm serve`` process but a few
(``get_driver_env_vars``: minus ``WORKER_SPECIFIC_ENV_VARS`` such as
VLLM_HOST_IP, and ``ray_non_carry_over_env_vars.json``), applied with
``os.environ.setdefault``: a variable the actor already has, from the raylet
of its own node (Ray's workers inherit the raylet's environment), is kept;
any other is taken from the head. So a value that belongs to one node must
either be set on every node's raylet or stay out of vLLM's environment.
fabric_environment sets NODE_KEYS on every node; the variables whose presence
depends on the node (the GID policy's NCCL_IB_GID_INDEX or
NCCL_IB_ADDR_RANGE, and whatever one node's fabric_env_extra adds) stay on
the raylets, out of vLLM's unit (vllm_serve_environment).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean

# What fabric_environment sets on every node, whatever its GID policy.
FABRIC_KEYS = ("NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "VLLM_HOST_IP", "CUDA_HOME",
               "RAY_memory_monitor_refresh_ms", "PATH")
# The twins of the cabled port: rdma_netdev_info's nccl_env names them on every node.
HCA_KEY = "NCCL_IB_HCA"
# Set by every node's raylet, so each of vLLM's ranks keeps its own node's value.
NODE_KEYS = FABRIC_KEYS + (HCA_KEY,)
# Set on a node only when its GID policy needs them (fabric.choose_gid_policy).
GID_POLICY_KEYS = ("NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_RANGE")
# The variable a persistent raylet resolves anew at each start (roce_gid's start_env_script).
START_ENV_KEY = "NCCL_IB_GID_INDEX"


def _int(value):
    """An int as Jinja's int filter reads it ("4", 4, "4.0")."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return int(float(value))


def _bool(value):
    return boolean(value, strict=False)


def _merged(*dicts):
    """Later dicts win (Ansible's combine); None counts as empty."""
    out = {}
    for one in dicts:
        out.update(one or {})
    return out


def fabric_environment(settings):
    """The NCCL/Gloo/vLLM environment of one node's raylet.

    ``settings``: roce_ifname, roce_ip, cuda_home,
    memory_monitor_refresh_ms, path_prepend (list), path_base, nccl_env
    (the fabric role's: NCCL_IB_HCA and the GID policy's variables), extra
    (fabric_env_extra, merged last)."""
    env = {
        "NCCL_IB_DISABLE": "0",
        "NCCL_SOCKET_IFNAME": settings["roce_ifname"],
        "GLOO_SOCKET_IFNAME": settings["roce_ifname"],
        "VLLM_HOST_IP": settings["roce_ip"],
        "CUDA_HOME": settings["cuda_home"],
        "RAY_memory_monitor_refresh_ms": str(_int(settings["memory_monitor_refresh_ms"])),
        "PATH": ":".join(str(p) for p in list(settings["path_prepend"]) + [settings["path_base"]]),
    }
    return _merged(env, settings.get("nccl_env"), settings.get("extra"))


def vllm_fabric_environment(fabric_env):
    """The part of the head's fabric environment that vLLM's unit carries:
    NODE_KEYS only, which every node's raylet sets itself (so vLLM's
    setdefault never fills them on another node). The GID policy's
    variables and fabric_env_extra's own keys stay on the raylets."""
    return dict((key, fabric_env[key]) for key in NODE_KEYS if key in fabric_env)


def raylet_unit(settings):
    """What this node's raylet runs: {unit, argv, environment, properties, start_env_script}.

    ``settings``: is_head, head_unit, worker_unit, venv, ray_port,
    ray_address, roce_ip, num_gpus, num_cpus, object_store_memory (None:
    Ray's choice), ports (laguna_ray_ports), extra_args, fabric_env,
    ray_auth, drain_timeout, environment (ray_cluster_environment),
    limit_memlock, head_memory_max, worker_memory_max, memory_swap_max,
    memory_high (None: none), stop_timeout, kill_mode, extra_properties,
    start_env_script (roce_gid's, used when the GID index is pinned)."""
    s = settings
    head = _bool(s["is_head"])
    ports = s["ports"]
    argv = ["%s/bin/ray" % s["venv"], "start", "--block"]
    argv += ["--head", "--port=%s" % s["ray_port"]] if head else ["--address=%s" % s["ray_address"]]
    argv.append("--node-ip-address=%s" % s["roce_ip"])
    for flag, key in (("--num-gpus", "num_gpus"), ("--num-cpus", "num_cpus"),
                      ("--object-store-memory", "object_store_memory")):
        if s.get(key) is not None:
            argv.append("%s=%s" % (flag, s[key]))
    for flag, key in (("--node-manager-port", "node_manager"), ("--object-manager-port", "object_manager"),
                      ("--metrics-export-port", "metrics_export"),
                      ("--dashboard-agent-grpc-port", "dashboard_agent_grpc"),
                      ("--dashboard-agent-listen-port", "dashboard_agent_listen"),
                      ("--runtime-env-agent-port", "runtime_env_agent"),
                      ("--min-worker-port", "min_worker"), ("--max-worker-port", "max_worker")):
        argv.append("%s=%s" % (flag, ports[key]))
    argv += list(s.get("extra_args") or [])
    fabric_env = s["fabric_env"]
    environment = _merged(fabric_env, {"RAY_AUTH_MODE": "token"} if _bool(s["ray_auth"]) else {},
                          {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(s["drain_timeout"])}, s.get("environment"))
    properties = {"LimitMEMLOCK": s["limit_memlock"],
                  "MemoryMax": s["head_memory_max"] if head else s["worker_memory_max"],
                  "MemorySwapMax": s["memory_swap_max"],
                  "TimeoutStopSec": str(s["stop_timeout"]),
                  "KillMode": s["kill_mode"]}
    if s.get("memory_high") is not None:
        properties["MemoryHigh"] = s["memory_high"]
    properties = _merged(properties, s.get("extra_properties"))
    return {"unit": s["head_unit"] if head else s["worker_unit"], "argv": argv, "environment": environment,
            "properties": properties,
            # A persistent unit resolves the pinned GID index anew at each start.
            "start_env_script": s.get("start_env_script") if START_ENV_KEY in fabric_env else None}


def raylet_ids(raylets):
    """The systemd invocation ids of every node's raylet, comma-separated,
    from the results of vllm_serve's raylets.yml ("none" for a node whose
    raylet has none; "unknown" when they were not read)."""
    if not isinstance(raylets, Mapping) or not isinstance(raylets.get("results"), list):
        return "unknown"
    ids = []
    for result in raylets["results"]:
        props = result.get("properties") if isinstance(result, Mapping) else None
        ids.append(str(props.get("InvocationID", "none")) if isinstance(props, Mapping) else "none")
    return ",".join(ids)


def speculative_config(settings):
    """--speculative-config as the recipe writes it: method, model,
    num_speculative_tokens in that order, then speculative_extra; compact JSON."""
    config = {"method": settings["speculative_method"], "model": settings["draft_path"],
              "num_speculative_tokens": _int(settings["num_speculative_tokens"])}
    config.update(settings.get("speculative_extra") or {})
    return json.dumps(config, separators=(",", ":"))


def vllm_serve_unit(settings):
    """What vllm serve runs: {unit, argv, environment, properties}.

    ``settings``: unit, venv, model_path, served_model_name,
    distributed_executor_backend, tensor_parallel_size, enforce_eager,
    max_model_len, gpu_memory_utilization, kv_cache_memory_bytes,
    max_num_seqs, max_num_batched_tokens, trust_remote_code, speculative,
    speculative_method, draft_path, num_speculative_tokens,
    speculative_extra, host, port, extra_args, fabric_env (the head's),
    ray_address, ray_auth, persistent, raylets (vllm_serve's raylets.yml
    results, or None), environment (vllm_serve_environment), memory_max,
    memory_swap_max, stop_timeout, kill_mode, extra_properties."""
    s = settings
    argv = ["%s/bin/vllm" % s["venv"], "serve", s["model_path"],
            "--served-model-name", s["served_model_name"],
            "--distributed-executor-backend", s["distributed_executor_backend"],
            "--tensor-parallel-size", str(s["tensor_parallel_size"])]
    if _bool(s["enforce_eager"]):
        argv.append("--enforce-eager")
    argv += ["--max-model-len", str(s["max_model_len"]),
             "--gpu-memory-utilization", str(s["gpu_memory_utilization"]),
             "--kv-cache-memory-bytes", str(s["kv_cache_memory_bytes"]),
             "--max-num-seqs", str(s["max_num_seqs"]),
             "--max-num-batched-tokens", str(s["max_num_batched_tokens"])]
    if _bool(s["trust_remote_code"]):
        argv.append("--trust-remote-code")
    if _bool(s["speculative"]):
        argv += ["--speculative-config", speculative_config(s)]
    argv += ["--host", s["host"], "--port", str(s["port"])]
    argv += list(s.get("extra_args") or [])
    # The Ray token and the API key are not here: the unit reads them from
    # its private file (vllm_serve_secret_environment).
    environment = _merged(
        vllm_fabric_environment(s["fabric_env"]),
        {"RAY_ADDRESS": s["ray_address"]},
        {"RAY_AUTH_MODE": "token"} if _bool(s["ray_auth"]) else {},
        # The raylets' invocation ids, not for a persistent unit, which the
        # user manager starts by itself with the raylets of a new boot.
        {} if _bool(s["persistent"]) else {"LAGUNA_RAYLETS": raylet_ids(s.get("raylets"))},
        s.get("environment"))
    properties = _merged({"MemoryMax": s["memory_max"], "MemorySwapMax": s["memory_swap_max"],
                          "TimeoutStopSec": str(s["stop_timeout"]), "KillMode": s["kill_mode"]},
                         s.get("extra_properties"))
    return {"unit": s["unit"], "argv": argv, "environment": environment, "properties": properties}


def as_filter(name, function, error):
    """``function`` as the filter ``name``: a missing setting (KeyError) or a
    wrong value (TypeError, ValueError) becomes ``error`` (the controller's
    AnsibleFilterError, which module_utils does not import) naming the filter."""
    def run(*args):
        try:
            return function(*args)
        except KeyError as exc:
            raise error("%s: the settings lack %s" % (name, exc))
        except (TypeError, ValueError) as exc:
            raise error("%s: %s" % (name, exc))
    run.__name__ = name
    run.__doc__ = function.__doc__
    return run


# --- When a run restarts a service -----------------------------------------

RAYLET_CHANGED = "ray_cluster_raylet_changed"


def _changed(hostvars, host):
    """Whether this run changed the raylet of ``host`` (the ray_cluster
    role's fact; False for a node the role did not reach)."""
    try:
        facts = hostvars[host]
    except KeyError:
        return False
    if not isinstance(facts, Mapping) or RAYLET_CHANGED not in facts:
        return False
    return _bool(facts[RAYLET_CHANGED])


def worker_raylet_state(head_host, hostvars):
    """A worker raylet joins a head that this run (re)started afresh:
    "restarted" then, else "started" (kept as it is when it runs with its
    settings). The head need not be in the play (--limit)."""
    return "restarted" if _changed(hostvars, head_host) else "started"


def vllm_serve_state(cluster_hosts, hostvars, head_host, health_state, persistent, check_mode=False):
    """The state "restarted" when vLLM's Ray connection or server is gone: the head's
    raylet changed in this run (a new cluster), the server is hung, or (a
    persistent unit, whose environment has no raylet ids) any worker's
    raylet changed in this run; else "started".

    In check mode a worker raylet that would restart makes a transient unit
    "restarted" too: a real run restarts it through the raylets' invocation
    ids in its environment (LAGUNA_RAYLETS), which check mode cannot see
    change, so the dry run names the restart the real run makes."""
    if health_state == "hung" or _changed(hostvars, head_host):
        return "restarted"
    if (_bool(persistent) or _bool(check_mode)) and any(
            _changed(hostvars, host) for host in cluster_hosts if host != head_host):
        return "restarted"
    return "started"
