# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""monitoring_render: what the monitoring role writes on a node (render() in plugins/module_utils/monitoring.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import monitoring
from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars


def monitoring_render(hosts, hostvars, settings):
    """{node_exporter_default, prometheus_default, prometheus_config, rules} of this node."""
    nodes = host_vars(hosts, hostvars, AnsibleFilterError, "monitoring_render")
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("monitoring_render: the settings must be a mapping")
    hosts = [host for host, _vars in nodes]
    try:
        return monitoring.render(hosts, hostvars, settings)
    except KeyError as exc:
        raise AnsibleFilterError("monitoring_render: the settings lack %s" % exc)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("monitoring_render: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"monitoring_render": monitoring_render}
