# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""laguna.spark.peers_reached: on the controller, stop a node's role in one
sentence when another node of the play, whose facts the role reads, failed
earlier in the run or did not get that far (module_utils/peers.py decides)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.laguna.spark.plugins.module_utils import peers

ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "facts": {"type": "list", "elements": "str", "default": []},
    "role": {"type": "str", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars.get("hostvars") or {}
        me = task_vars.get("inventory_hostname")
        message = peers.unready(
            me, args["hosts"], lambda host: hostvars[host], list(task_vars.get("ansible_play_hosts") or []),
            list(task_vars.get("ansible_play_hosts_all") or []), args["role"], args["facts"])
        result["changed"] = False
        if message:
            result.update(failed=True, msg=message)
        else:
            result["msg"] = "every other node in the play got this far"
        return result
