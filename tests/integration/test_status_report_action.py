"""laguna.spark.status_report runs on the controller (its action plugin): the
roles' status tasks judge what the probes read without another call to the
node. Proved with a node that cannot be reached (ssh to a loopback port
nothing listens on): the report comes back all the same, the same as the
module builds, and a bad argument is refused as the module refuses it."""
import json
import shlex

from helpers import free_port
from helpers.constants import SERVED_MODEL

from ansible_collections.laguna.spark.plugins.module_utils import status_reports

MODELS = {"status": 200, "json": {"data": [{"id": SERVED_MODEL}]}}
ARGS = {"kind": "vllm_serve", "unit": "laguna-vllm", "unit_state": "active", "address": "http://127.0.0.1:8000",
        "served_model_name": SERVED_MODEL, "models": MODELS}


def unreachable(port):
    # Extra vars win over the inventory's ansible_connection=local.
    return shlex.join(["-e", json.dumps({"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                                         "ansible_port": port, "ansible_ssh_common_args": "-o ConnectTimeout=3"})])


def test_the_report_is_built_on_the_controller_without_reaching_the_node(runner):
    result = runner.run("    - laguna.spark.status_report: %s\n" % json.dumps(ARGS), cmdline=unreachable(free_port()))
    assert result.rc == 0, result.text[-3000:]
    [report] = [event["event_data"]["res"]["report"] for event in result.events if event["event"] == "runner_on_ok"]
    assert report == status_reports.build(dict({k: v["default"] for k, v in status_reports.ARGUMENT_SPEC.items()
                                                if "default" in v}, gid_index=None, **ARGS))
    assert report["ok"] and report["url"] == "http://127.0.0.1:8000"
    # A check that could not fail on a connection that works: the same inventory
    # does fail a task that needs the node.
    result = runner.run("    - ansible.builtin.ping:\n", cmdline=unreachable(free_port()))
    assert result.rc != 0 and "UNREACHABLE" in result.text, result.text[-3000:]


def test_a_bad_argument_is_refused_as_the_module_refuses_it(runner):
    result = runner.run("    - laguna.spark.status_report: {kind: nonsense}\n",
                        cmdline=unreachable(free_port()))
    assert result.rc != 0
    assert "value of kind must be one of: staging, ray_cluster, vllm_serve, got: nonsense" in result.flat, \
        result.text[-3000:]
