"""Which of a role's tasks reached a node, from ansible-runner's events.

Issue 20's "one read per role": on a node already as a role wants it, the
role runs one task that reaches the node (its probe); the rest are skipped or
run on the controller. The integration tests of the converted roles count
them with node_tasks().
"""

# Actions that run on the controller only (and the role's argument check).
# peers_reached is the collection's action plugin that reads hostvars.
CONTROLLER_ACTIONS = frozenset((
    "assert", "debug", "set_fact", "include_role", "include_tasks", "import_tasks", "meta",
    "validate_argument_spec", "peers_reached"))


def node_tasks(events, role, host=None, field="task_action"):
    """``field`` (the task's action, or ``"task"``: its name) of each task of
    ``role`` that ran (ok or failed, not skipped) on a node - on ``host``
    only, when given - in the order they ran."""
    found = []
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") not in ("runner_on_ok", "runner_on_failed") or data.get("role") != role:
            continue
        if host is not None and data.get("host") != host:
            continue
        action = data.get("resolved_action") or data.get("task_action") or ""
        if action.rpartition(".")[2] not in CONTROLLER_ACTIONS:
            found.append(data.get(field))
    return found
