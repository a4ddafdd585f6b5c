# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""converged_everywhere: whether every host of the play is as the last complete
run left it (the logic: everywhere() in plugins/module_utils/converged.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import converged
from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars


def converged_everywhere(hosts, hostvars, result_var="laguna_converged"):
    """True when each host's ``result_var`` (a laguna.spark.converged check) says converged."""
    nodes = host_vars(hosts, hostvars, AnsibleFilterError, "converged_everywhere")
    return converged.everywhere([node[result_var] if result_var in node else None for _host, node in nodes])


class FilterModule(object):
    def filters(self):
        return {"converged_everywhere": converged_everywhere}
