"""No value that belongs to one node reaches another through vLLM's environment.

vLLM 0.25.1's RayExecutorV2 gives each worker actor (a TP rank) every
variable of the ``vllm serve`` process but WORKER_SPECIFIC_ENV_VARS, applied
with ``os.environ.setdefault`` over the environment the actor inherited from
its node's raylet. The collection renders (tests/helpers/render.py) a head
and a worker that resolve different GID policies (the head pinned:
NCCL_IB_GID_INDEX; the worker, whose older address misleads NCCL, a range:
NCCL_IB_ADDR_RANGE) and a fabric_env_extra key set on the head only; vLLM's
own code (probe_vllm_env.py) then builds each rank's environment from the
rendered vllm serve and raylet environments. Every fabric variable that
differs between the nodes, or that one node sets and the other does not,
must have its own node's value in each rank (or none where its node sets
none).

The replay the unit tests use (tests/helpers/vllm_env.py) is checked here
against that same code, and the executor's use of it is read from its source.
"""

import ast
import os

import pytest

from _conformance import run_in_venv
from helpers import vllm_env
from helpers.render import render_default_deployment

HEAD_ONLY = "NCCL_HEAD_ONLY_SETTING"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The head pinned with a key of its own, the worker on the default policy (a range there)."""
    rendered = render_default_deployment(str(tmp_path_factory.mktemp("render-mixed")), host_vars={
        "spark-1": {"fabric_gid_policy": "pinned", "fabric_env_extra": {HEAD_ONLY: "1"}}})
    head = rendered["hosts"][rendered["head"]]
    worker = rendered["hosts"][rendered["workers"][0]]
    assert (head["gid_policy"], worker["gid_policy"]) == ("pinned", "range")
    return head, worker


@pytest.fixture(scope="module")
def ranks(vllm_python, mixed, tmp_path_factory):
    head, worker = mixed
    config = str(tmp_path_factory.mktemp("vllm-config"))  # no ray_non_carry_over_env_vars.json, as on a Spark
    serve = {k: str(v) for k, v in head["vllm_serve"]["environment"].items()}
    raylets = {"head": {k: str(v) for k, v in head["ray"]["environment"].items()},
               "worker": {k: str(v) for k, v in worker["ray"]["environment"].items()}}
    report = run_in_venv(vllm_python, "probe_vllm_env.py", {"serve_env": serve, "raylets": raylets},
                         timeout=300, env={"VLLM_CONFIG_ROOT": config})
    return dict(report, serve=serve, raylets=raylets)


def per_node_keys(a, b):
    """Variables one raylet sets and the other does not, or sets to another value."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def test_the_rendered_nodes_differ_in_their_fabric_variables(ranks):
    keys = per_node_keys(ranks["raylets"]["head"], ranks["raylets"]["worker"])
    for key in ("NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_RANGE", HEAD_ONLY, "VLLM_HOST_IP"):
        assert key in keys, keys


@pytest.mark.parametrize("node", ["head", "worker"])
def test_each_rank_has_its_own_nodes_value_of_every_per_node_variable(ranks, node):
    raylet, rank = ranks["raylets"][node], ranks["ranks"][node]
    for key in per_node_keys(ranks["raylets"]["head"], ranks["raylets"]["worker"]):
        assert rank.get(key) == raylet.get(key), (
            "%s's rank has %s=%r from vllm serve's environment, its raylet %r"
            % (node, key, rank.get(key), raylet.get(key)))


def test_the_worker_rank_gets_nothing_of_the_heads_gid_policy(ranks):
    worker = ranks["ranks"]["worker"]
    assert "NCCL_IB_GID_INDEX" not in worker and HEAD_ONLY not in worker
    assert worker["NCCL_IB_ADDR_RANGE"] == ranks["raylets"]["worker"]["NCCL_IB_ADDR_RANGE"]
    # What vllm serve does give the worker's rank is the cluster's.
    assert set(worker) - set(ranks["raylets"]["worker"]) == {"RAY_ADDRESS", "LAGUNA_RAYLETS"}


def test_the_test_can_fail_the_heads_whole_fabric_environment_would_leak(vllm_python, mixed, tmp_path_factory):
    # As the collection rendered it before: vllm serve with the head's whole
    # fabric environment. vLLM then gives the worker's rank the head's index.
    head, worker = mixed
    serve = {k: str(v) for k, v in head["ray"]["environment"].items()}
    report = run_in_venv(vllm_python, "probe_vllm_env.py", {
        "serve_env": serve, "raylets": {"worker": {k: str(v) for k, v in worker["ray"]["environment"].items()}}},
        timeout=300, env={"VLLM_CONFIG_ROOT": str(tmp_path_factory.mktemp("vllm-config-2"))})
    assert report["ranks"]["worker"]["NCCL_IB_GID_INDEX"] == serve["NCCL_IB_GID_INDEX"]


def test_the_unit_tests_replay_is_vllms(ranks):
    assert sorted(vllm_env.WORKER_SPECIFIC_ENV_VARS) == ranks["worker_specific"]
    assert vllm_env.driver_env_vars(ranks["serve"]) == ranks["driver_env_vars"]
    for node, raylet in ranks["raylets"].items():
        assert vllm_env.rank_environment(ranks["serve"], raylet) == ranks["ranks"][node]


def _function(tree, name):
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, "%s: %d definitions" % (name, len(found))
    return found[0]


def test_the_executor_hands_every_rank_the_driver_variables_and_nothing_else(vllm_src):
    # The probe calls the pieces; here, that RayExecutorV2 puts them together
    # that way: driver_env_vars from get_driver_env_vars(WORKER_SPECIFIC_ENV_VARS),
    # passed to every actor's initialize_worker with an empty env_vars.
    path = os.path.join(vllm_src, "v1", "executor", "ray_executor_v2.py")
    tree = ast.parse(open(path).read(), path)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "get_driver_env_vars"]
    assert len(calls) == 1 and [(k.arg, ast.unparse(k.value)) for k in calls[0].keywords] == [
        ("worker_specific_vars", "WORKER_SPECIFIC_ENV_VARS")]
    remote = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(
        "actor.initialize_worker.remote")]
    assert len(remote) == 1, "initialize_worker.remote calls: %d" % len(remote)
    args = [ast.unparse(a) for a in remote[0].args]
    assert args[2] == "self.driver_env_vars", args
    # The innermost function around that call.
    init = max((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and remote[0] in list(ast.walk(n))),
               key=lambda n: n.lineno)
    assigned = [n for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
                and args[1] in [ast.unparse(t) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]]
    assert [ast.unparse(n.value) for n in assigned] == ["{}"], "env_vars given to the ranks: %s" % args[1]
    changed = [n for n in ast.walk(init) if isinstance(n, (ast.Subscript, ast.Attribute))
               and isinstance(n.ctx, ast.Store) and ast.unparse(n).startswith(args[1])]
    assert not changed, "%s is filled in: %s" % (args[1], [ast.unparse(n) for n in changed])
    body = ast.unparse(_function(tree, "initialize_worker"))
    assert "os.environ.setdefault(key, value)" in body
