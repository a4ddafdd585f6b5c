# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""converged_everywhere: whether every host of the play is as the last complete
run left it (the logic: everywhere() in plugins/module_utils/converged.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import converged


def converged_everywhere(hosts, hostvars, result_var="laguna_converged"):
    """True when each host's ``result_var`` (a laguna.spark.converged check) says converged."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("converged_everywhere: the input must be a list of inventory host names")
    results = []
    for host in hosts:
        try:
            node = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("converged_everywhere: %s is not in the inventory" % host)
        if not isinstance(node, Mapping):
            raise AnsibleFilterError("converged_everywhere: the hostvars of %s are not a mapping" % host)
        results.append(node[result_var] if result_var in node else None)
    return converged.everywhere(results)


class FilterModule(object):
    def filters(self):
        return {"converged_everywhere": converged_everywhere}
