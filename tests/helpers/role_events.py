"""Which of a role's tasks reached a node, from ansible-runner's events.

Issue 20's "one read per role": on a node already as a role wants it, the
role runs one task that reaches the node (its probe); the rest are skipped or
run on the controller. The integration tests of the converted roles count
them with node_tasks(); the fault suite's last rerun counts every role's
calls per node with node_calls(), from the lines the tests' callback
(tests/helpers/callbacks/task_events.py) writes.
"""
import json

# Actions that run on the controller only (and the role's argument check).
# peers_reached (it reads hostvars) and status_report (pure computation) are
# the collection's action plugins that never reach the node.
CONTROLLER_ACTIONS = frozenset((
    "assert", "debug", "set_fact", "include_role", "include_tasks", "import_tasks", "meta",
    "validate_argument_spec", "peers_reached", "status_report"))
# Where a task delegated to them runs: the controller.
CONTROLLER_HOSTS = frozenset(("localhost", "127.0.0.1"))


def reached_node(event):
    """Whether ``event`` is a task of a role that ran (ok or failed, not
    skipped) on a node: not a controller-only action, not delegated to the
    controller."""
    data = event.get("event_data") or {}
    if event.get("event") not in ("runner_on_ok", "runner_on_failed") or not data.get("role"):
        return False
    if data.get("delegated_to") in CONTROLLER_HOSTS:
        return False
    action = data.get("resolved_action") or data.get("task_action") or ""
    return action.rpartition(".")[2] not in CONTROLLER_ACTIONS


def node_tasks(events, role, host=None, field="task_action"):
    """``field`` (the task's action, or ``"task"``: its name) of each task of
    ``role`` that reached a node (reached_node) - on ``host`` only, when
    given - in the order they ran."""
    return [event["event_data"].get(field) for event in events
            if reached_node(event) and event["event_data"]["role"] == role
            and (host is None or event["event_data"].get("host") == host)]


def read(path):
    """The events tests/helpers/callbacks/task_events.py wrote to ``path``
    (none when the file is missing)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def node_calls(events):
    """{host: {role: module calls that reached the node}} (reached_node): a
    loop's task counts one call per item."""
    calls = {}
    for event in filter(reached_node, events):
        data = event["event_data"]
        per_host = calls.setdefault(data.get("host"), {})
        per_host[data["role"]] = per_host.get(data["role"], 0) + max(1, data.get("items") or 0)
    return calls
