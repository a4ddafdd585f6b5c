# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""laguna.spark.status_report on the controller: the report is pure
computation on the task's arguments (module_utils/status_reports.py), so no
module is sent to the node; the arguments are checked against the module's
own argument spec first."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.laguna.spark.plugins.module_utils import status_reports


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars or {})
        _validation, args = self.validate_argument_spec(argument_spec=status_reports.ARGUMENT_SPEC)
        result.update(changed=False, report=status_reports.build(args))
        return result
