# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""ray_cluster_actions and ray_cluster_quiet_report: the ray_cluster role's decisions on the
controller, from each node's ray_cluster_probe (plugins/module_utils/ray_cluster_probe.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.laguna.spark.plugins.module_utils import ray_cluster_probe

PROBE = "ray_cluster_probe"
ACTIONS = "ray_cluster_todo"


def _facts(hostvars, host):
    try:
        facts = hostvars[host]
    except KeyError:
        return {}
    return facts if isinstance(facts, Mapping) else {}


def _get(facts, name):
    value = facts[name] if name in facts else None
    return dict(value) if isinstance(value, Mapping) else None


def ray_cluster_actions(probe, hostvars, head_host, is_head, auth, play_hosts=None):
    """What the role does on this node: {token_make, token_install, unit, needs_token, token_differs}.
    The head's probe counts only when the head is in ``play_hosts`` (an earlier play's is stale)."""
    if probe is not None and not isinstance(probe, Mapping):
        raise AnsibleFilterError("ray_cluster_actions: the input must be a ray_cluster_probe result")
    head = _get(_facts(hostvars, head_host), PROBE) if play_hosts is None or head_host in play_hosts else None
    return ray_cluster_probe.actions(dict(probe or {}), head, boolean(is_head), boolean(auth))


def ray_cluster_quiet_report(hosts, hostvars, head_host, expected_nodes, expected_gpus, address, gid_index=None,
                             persistent=False):
    """The cluster report from the probes when nothing is to be done, else {}."""
    nodes = [{"host": host, "probe": _get(_facts(hostvars, host), PROBE),
              "actions": _get(_facts(hostvars, host), ACTIONS)} for host in hosts]
    # The head's probe counts only when the head is one of ``hosts`` (this play's).
    head = _get(_facts(hostvars, head_host), PROBE) if head_host in hosts else None
    try:
        return ray_cluster_probe.quiet_report(nodes, head, int(expected_nodes),
                                              float(expected_gpus), address, gid_index, boolean(persistent))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("ray_cluster_quiet_report: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"ray_cluster_actions": ray_cluster_actions, "ray_cluster_quiet_report": ray_cluster_quiet_report}
