# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""monitoring_render: what the monitoring role writes on a node (render() in plugins/module_utils/monitoring.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import monitoring


def monitoring_render(hosts, hostvars, settings):
    """{node_exporter_default, prometheus_default, prometheus_config, rules} of this node."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("monitoring_render: the input must be a list of inventory host names")
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("monitoring_render: the settings must be a mapping")
    hosts = list(hosts)
    for host in hosts:
        try:
            node = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("monitoring_render: %s is not in the inventory" % host)
        if not isinstance(node, Mapping):
            raise AnsibleFilterError("monitoring_render: the hostvars of %s are not a mapping" % host)
    try:
        return monitoring.render(hosts, hostvars, settings)
    except KeyError as exc:
        raise AnsibleFilterError("monitoring_render: the settings lack %s" % exc)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("monitoring_render: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"monitoring_render": monitoring_render}
