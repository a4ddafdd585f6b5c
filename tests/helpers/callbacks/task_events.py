"""Write each task result of a run as one JSON line, in the shape of
ansible-runner's events, so that tests/helpers/role_events.py reads the
playbook runs the tests start with ansible-playbook (the fault suite's)
the way it reads the integration tests' ansible-runner events.

Enabled by the tests only: ANSIBLE_CALLBACK_PLUGINS=<this directory>,
ANSIBLE_CALLBACKS_ENABLED=task_events, and LAGUNA_TASK_EVENTS=<file> (the
file the lines are appended to; without it the callback writes nothing).
"""
# pylint: disable=invalid-name
from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_events
type: notification
short_description: each task result as one JSON line (tests only)
description:
  - Appends one line per task result to the file named by C(LAGUNA_TASK_EVENTS).
requirements:
  - enable in configuration
"""


class CallbackModule(CallbackBase):
    """One JSON line per task result: event, host, role, action, delegation, items."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "task_events"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, event, result):
        path = os.environ.get("LAGUNA_TASK_EVENTS")
        if not path:
            return
        task = result._task  # pylint: disable=protected-access
        role = task._role.get_name(include_role_fqcn=False) if task._role else None  # pylint: disable=protected-access
        data = {"host": result._host.get_name(), "role": role, "task": task.name,  # pylint: disable=protected-access
                "task_action": task.action, "resolved_action": getattr(task, "_resolved_action", None) or task.action,
                "delegated_to": task.delegate_to,
                "changed": bool(result._result.get("changed")),  # pylint: disable=protected-access
                # A loop's task: one module call per item.
                "items": len(result._result.get("results") or ())}  # pylint: disable=protected-access
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": event, "event_data": data}) + "\n")

    def v2_runner_on_ok(self, result):
        self._write("runner_on_ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write("runner_on_failed", result)

    def v2_runner_on_skipped(self, result):
        self._write("runner_on_skipped", result)
