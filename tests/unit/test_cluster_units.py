"""What the raylets and vllm serve run (cluster_units and its filters), and when a run restarts them.

The environment tests replay what vLLM 0.25.1 does with the ``vllm serve``
process's environment (RayExecutorV2: every variable but
WORKER_SPECIFIC_ENV_VARS, applied with os.environ.setdefault in each worker
actor, which inherits its own node's raylet environment);
tests/conformance/test_vllm_rank_environment.py checks that replay against
vLLM's own code and the rendered roles.
"""

import json

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import cluster_units as cu
from ansible_collections.laguna.spark.plugins.modules import rdma_netdev_info
from helpers.filters import run_filters
from helpers.sysfs import spark
from helpers.vllm_env import rank_environment


HCA = "=rocep1s0f1:1,roceP2p1s0f1:1"


def fabric(address="192.168.100.1", nccl_env=None, extra=None, ifname="enp1s0f1np1"):
    return cu.fabric_environment({
        "roce_ifname": ifname, "roce_ip": address, "cuda_home": "/usr/local/cuda",
        "memory_monitor_refresh_ms": "0", "path_prepend": ["/home/spark/venvs/vllm-025/bin", "/usr/local/cuda/bin"],
        "path_base": "/usr/bin:/bin", "nccl_env": dict({"NCCL_IB_HCA": HCA}, **(nccl_env or {})), "extra": extra})


def raylet_settings(**over):
    settings = {
        "is_head": True, "head_unit": "laguna-ray-head", "worker_unit": "laguna-ray-worker",
        "venv": "/home/spark/venvs/vllm-025", "ray_port": 6379, "ray_address": "192.168.100.1:6379",
        "roce_ip": "192.168.100.1", "num_gpus": None, "num_cpus": None, "object_store_memory": 2000000000,
        "ports": {"node_manager": 6380, "object_manager": 6381, "metrics_export": 6382, "dashboard_agent_grpc": 6383,
                  "dashboard_agent_listen": 52365, "runtime_env_agent": 6384, "min_worker": 10002,
                  "max_worker": 19999},
        "extra_args": [], "fabric_env": fabric(), "ray_auth": True, "drain_timeout": 0,
        "environment": {"RAY_USAGE_STATS_ENABLED": "0"}, "limit_memlock": "infinity", "head_memory_max": "98G",
        "worker_memory_max": "110G", "memory_swap_max": "0", "memory_high": None, "stop_timeout": 20,
        "kill_mode": "mixed", "extra_properties": {}, "start_env_script": "#!/bin/sh\n"}
    settings.update(over)
    return settings


def serve_settings(**over):
    settings = {
        "unit": "laguna-vllm", "venv": "/home/spark/venvs/vllm-025", "model_path": "/m/Laguna-S-2.1-FP8",
        "served_model_name": "laguna-s-fp8", "distributed_executor_backend": "ray", "tensor_parallel_size": 2,
        "enforce_eager": True, "max_model_len": 262144, "gpu_memory_utilization": 0.85,
        "kv_cache_memory_bytes": 5368709120, "max_num_seqs": 2, "max_num_batched_tokens": 8192,
        "trust_remote_code": False, "speculative": True, "speculative_method": "dflash",
        "draft_path": "/m/Laguna-S-2.1-DFlash-W4A16", "num_speculative_tokens": 6, "speculative_extra": {},
        "host": "0.0.0.0", "port": 8000, "extra_args": [], "fabric_env": fabric(), "ray_address": "192.168.100.1:6379",
        "ray_auth": True, "persistent": False, "raylets": None, "environment": {}, "memory_max": "12G",
        "memory_swap_max": "0", "stop_timeout": 20, "kill_mode": "mixed", "extra_properties": {}}
    settings.update(over)
    return settings


# --- the fabric environment ------------------------------------------------------

@pytest.mark.parametrize("policy, extra", [("nccl", None), ("pinned", None), ("range", "10.0.0.7")])
def test_every_node_sets_the_node_keys_and_the_gid_policy_sets_only_its_own(tmp_path, run_module, policy, extra):
    # The fabric role's real nccl_env for each GID policy (rdma_netdev_info on a fake Spark).
    ib, net = spark(tmp_path, extra=extra)
    info = run_module(rdma_netdev_info, dict(sysfs_infiniband=ib, sysfs_net=net, address="192.168.100.1",
                                             hca_hint="rocep1s0f1", gid_policy="auto" if extra else policy))
    assert not info.failed and info["gid_policy"] == policy, info
    env = fabric(nccl_env=info["nccl_env"])
    assert set(cu.NODE_KEYS) <= set(env)
    assert set(env) - set(cu.NODE_KEYS) <= set(cu.GID_POLICY_KEYS)
    assert not set(cu.GID_POLICY_KEYS) & set(cu.NODE_KEYS)
    assert (set(env) - set(cu.NODE_KEYS)) == {"nccl": set(), "pinned": {"NCCL_IB_GID_INDEX"},
                                              "range": {"NCCL_IB_ADDR_RANGE"}}[policy]


def test_the_fabric_environment_as_the_recipe_sets_it():
    env = fabric(extra={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "enp1s0f0np0"})
    assert env == {
        "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "VLLM_HOST_IP": "192.168.100.1", "CUDA_HOME": "/usr/local/cuda", "RAY_memory_monitor_refresh_ms": "0",
        "PATH": "/home/spark/venvs/vllm-025/bin:/usr/local/cuda/bin:/usr/bin:/bin", "NCCL_IB_HCA": HCA,
        "NCCL_DEBUG": "INFO"}
    assert cu.fabric_environment({
        "roce_ifname": "e", "roce_ip": "1.2.3.4", "cuda_home": "/c", "memory_monitor_refresh_ms": 5,
        "path_prepend": [], "path_base": "/bin"})["RAY_memory_monitor_refresh_ms"] == "5"


# --- vLLM's environment never carries one node's value to another --------------

def nodes(head_policy_env, worker_policy_env, head_extra=None, worker_extra=None):
    head = fabric("192.168.100.1", head_policy_env, head_extra)
    worker = fabric("192.168.100.2", worker_policy_env, worker_extra, ifname="enP2p1s0f1np1")
    return head, worker


@pytest.mark.parametrize("head_env, worker_env", [
    ({"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_ADDR_RANGE": "192.168.100.0/23"}),
    ({"NCCL_IB_ADDR_RANGE": "192.168.100.0/23"}, {}),
    ({"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_GID_INDEX": "5"}),
    ({}, {"NCCL_IB_GID_INDEX": "5"}),
])
def test_each_rank_has_its_own_nodes_fabric_values_whatever_the_gid_policies(head_env, worker_env):
    head, worker = nodes(head_env, worker_env, head_extra={"NCCL_HEAD_ONLY": "1"},
                         worker_extra={"NCCL_WORKER_ONLY": "2"})
    serve = cu.vllm_serve_unit(serve_settings(fabric_env=head))["environment"]
    for raylet in (head, worker):
        rank = rank_environment(serve, raylet)
        for key in set(head) | set(worker):
            assert rank.get(key) == raylet.get(key), key
    # What the head's vLLM unit does carry to a worker's rank is the cluster's, not a node's.
    filled = set(rank_environment(serve, worker)) - set(worker)
    assert filled == {"RAY_ADDRESS", "RAY_AUTH_MODE", "LAGUNA_RAYLETS"}


def test_without_the_rule_the_heads_index_would_reach_the_worker():
    # The replay can fail: the head's whole fabric environment in vLLM's unit
    # (as before) gives the worker's rank the head's pinned index.
    head, worker = nodes({"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_ADDR_RANGE": "192.168.100.0/23"})
    assert rank_environment(dict(head), worker)["NCCL_IB_GID_INDEX"] == "3"


def test_vllm_keeps_the_node_keys_with_the_heads_overrides():
    head = fabric(nccl_env={"NCCL_IB_GID_INDEX": "3"}, extra={"NCCL_SOCKET_IFNAME": "x", "NCCL_DEBUG": "INFO"})
    env = cu.vllm_fabric_environment(head)
    assert sorted(env) == sorted(cu.NODE_KEYS) and env["NCCL_SOCKET_IFNAME"] == "x"


# --- the raylet --------------------------------------------------------------------

def test_the_head_and_a_worker_raylet():
    head = cu.raylet_unit(raylet_settings())
    assert head["unit"] == "laguna-ray-head"
    assert head["argv"][:6] == ["/home/spark/venvs/vllm-025/bin/ray", "start", "--block", "--head", "--port=6379",
                                "--node-ip-address=192.168.100.1"]
    assert "--object-store-memory=2000000000" in head["argv"] and not any("--num-" in a for a in head["argv"])
    assert head["argv"][-1] == "--max-worker-port=19999"
    assert head["environment"]["RAY_AUTH_MODE"] == "token"
    assert head["environment"]["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"
    assert head["properties"] == {"LimitMEMLOCK": "infinity", "MemoryMax": "98G", "MemorySwapMax": "0",
                                  "TimeoutStopSec": "20", "KillMode": "mixed"}
    assert head["start_env_script"] is None  # the index is not pinned
    worker = cu.raylet_unit(raylet_settings(
        is_head="false", roce_ip="192.168.100.2", num_gpus=1, object_store_memory=None, ray_auth=False,
        memory_high="90G", extra_args=["--labels={}"], extra_properties={"Nice": 5},
        fabric_env=fabric("192.168.100.2", {"NCCL_IB_GID_INDEX": "5"})))
    assert worker["unit"] == "laguna-ray-worker"
    assert worker["argv"][3:6] == ["--address=192.168.100.1:6379", "--node-ip-address=192.168.100.2",
                                   "--num-gpus=1"]
    assert worker["argv"][-1] == "--labels={}" and not any("object-store" in a for a in worker["argv"])
    assert "RAY_AUTH_MODE" not in worker["environment"]
    assert worker["properties"]["MemoryMax"] == "110G" and worker["properties"]["MemoryHigh"] == "90G"
    assert worker["properties"]["Nice"] == 5
    assert worker["start_env_script"] == "#!/bin/sh\n"  # pinned: resolved anew at each start


def test_the_filters_return_what_cluster_units_decides_and_name_a_missing_setting():
    raylet, serve = raylet_settings(), serve_settings()
    no_ports = dict(raylet)
    del no_ports["ports"]
    fabric_settings = {"roce_ifname": "e", "roce_ip": "1.2.3.4", "cuda_home": "/c", "memory_monitor_refresh_ms": 0,
                       "path_prepend": [], "path_base": "/bin"}
    hv = {"head": {cu.RAYLET_CHANGED: True}, "w1": {}}
    out = run_filters([
        ("raylet_unit", [raylet]), ("raylet_unit", [no_ports]), ("vllm_serve_unit", [serve]),
        ("fabric_environment", [fabric_settings]), ("fabric_environment", [{"roce_ip": "x"}]),
        ("worker_raylet_state", ["head", hv]), ("vllm_serve_state", [["head", "w1"], hv, "head", "healthy", False]),
        ("vllm_serve_state", ["head", hv, "head", "healthy", False])])
    assert out[0] == cu.raylet_unit(raylet)
    # AnsibleFilterError (ansible-core 2.19 names it AnsibleTemplatePluginError).
    assert out[1].endswith("Error: raylet_unit: the settings lack 'ports'")
    assert out[2] == cu.vllm_serve_unit(serve)
    assert out[3] == cu.fabric_environment(fabric_settings)
    assert out[4].endswith("Error: fabric_environment: the settings lack 'roce_ifname'")
    assert out[5:7] == ["restarted", "restarted"]
    assert "Error: vllm_serve_state: the cluster's hosts must be a list" in out[7]


# --- vllm serve ----------------------------------------------------------------------

def test_vllm_serve_as_the_recipe_writes_it():
    unit = cu.vllm_serve_unit(serve_settings())
    assert unit["argv"] == [
        "/home/spark/venvs/vllm-025/bin/vllm", "serve", "/m/Laguna-S-2.1-FP8", "--served-model-name", "laguna-s-fp8",
        "--distributed-executor-backend", "ray", "--tensor-parallel-size", "2", "--enforce-eager",
        "--max-model-len", "262144", "--gpu-memory-utilization", "0.85", "--kv-cache-memory-bytes", "5368709120",
        "--max-num-seqs", "2", "--max-num-batched-tokens", "8192",
        "--speculative-config", '{"method":"dflash","model":"/m/Laguna-S-2.1-DFlash-W4A16","num_speculative_tokens":6}',
        "--host", "0.0.0.0", "--port", "8000"]
    assert unit["environment"]["LAGUNA_RAYLETS"] == "unknown"
    assert unit["properties"] == {"MemoryMax": "12G", "MemorySwapMax": "0", "TimeoutStopSec": "20",
                                  "KillMode": "mixed"}


def test_vllm_serve_switches_and_extras():
    unit = cu.vllm_serve_unit(serve_settings(
        enforce_eager="false", trust_remote_code="yes", num_speculative_tokens="4",
        speculative_extra={"method": "eagle", "draft_tensor_parallel_size": 1}, extra_args=["--seed", "1"],
        environment={"VLLM_LOGGING_LEVEL": "DEBUG", "RAY_ADDRESS": "x"}, persistent=True, ray_auth=False,
        extra_properties={"CPUQuota": "50%"}))
    argv = unit["argv"]
    assert "--enforce-eager" not in argv and "--trust-remote-code" in argv and argv[-2:] == ["--seed", "1"]
    spec = argv[argv.index("--speculative-config") + 1]
    assert list(json.loads(spec).items()) == [("method", "eagle"), ("model", "/m/Laguna-S-2.1-DFlash-W4A16"),
                                              ("num_speculative_tokens", 4), ("draft_tensor_parallel_size", 1)]
    env = unit["environment"]
    assert "LAGUNA_RAYLETS" not in env and "RAY_AUTH_MODE" not in env  # persistent; no Ray token auth
    assert env["RAY_ADDRESS"] == "x" and env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert unit["properties"]["CPUQuota"] == "50%"
    assert "--speculative-config" not in cu.vllm_serve_unit(serve_settings(speculative=False))["argv"]


def test_the_raylet_ids_in_a_transient_units_environment():
    raylets = {"results": [{"properties": {"InvocationID": "aa"}}, {"properties": {}}, {"skipped": True},
                           {"properties": None}]}
    assert cu.raylet_ids(raylets) == "aa,none,none,none"
    assert cu.raylet_ids(None) == cu.raylet_ids({}) == "unknown"
    assert cu.vllm_serve_unit(serve_settings(raylets=raylets))["environment"]["LAGUNA_RAYLETS"] == "aa,none,none,none"


# --- when a run restarts a service ------------------------------------------------

HOSTS = ["head", "w1", "w2"]


def hostvars(**changed):
    return dict((h, {cu.RAYLET_CHANGED: changed[h]} if h in changed else {"laguna_roce_ip": "x"}) for h in HOSTS)


def test_a_worker_raylet_restarts_with_a_head_this_run_changed():
    state = cu.worker_raylet_state
    assert state("head", hostvars(head=True)) == "restarted"
    assert state("head", hostvars(head="False")) == "started"
    assert state("head", hostvars()) == "started"  # the head is not in the play (--limit)
    assert state("gone", hostvars(head=True)) == "started"


@pytest.mark.parametrize("changed, health, persistent, want", [
    ({}, "healthy", False, "started"),
    ({}, "down", True, "started"),
    ({}, "hung", False, "restarted"),
    ({"head": True}, "healthy", False, "restarted"),
    ({"head": True, "w1": False}, "down", True, "restarted"),
    # A transient unit restarts through LAGUNA_RAYLETS; a persistent one has no raylet ids.
    ({"w2": True}, "healthy", False, "started"),
    ({"head": False, "w2": True}, "healthy", True, "restarted"),
    ({"head": False, "w1": False}, "healthy", True, "started"),
])
def test_vllm_serve_restarts_with_a_new_cluster_or_a_hung_server(changed, health, persistent, want):
    assert cu.vllm_serve_state(HOSTS, hostvars(**changed), "head", health, persistent) == want


@pytest.mark.parametrize("changed, want", [
    # The worker raylet would restart: the real run restarts a transient vLLM
    # through LAGUNA_RAYLETS, so the dry run says so.
    ({"w2": True}, "restarted"),
    ({"head": False, "w1": False}, "started"),
    ({}, "started"),
])
def test_check_mode_names_the_vllm_restart_a_worker_raylet_restart_makes(changed, want):
    assert cu.vllm_serve_state(HOSTS, hostvars(**changed), "head", "healthy", False, check_mode=True) == want
    assert cu.vllm_serve_state(HOSTS, hostvars(**changed), "head", "healthy", False, check_mode=False) == "started"
