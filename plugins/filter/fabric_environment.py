# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""fabric_environment: the fabric_env role's environment of the raylets and vllm serve
(the logic: service_environment() and start_script_for() in plugins/module_utils/fabric.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import fabric


def fabric_environment(gid, ifname, address, cuda_home, memory_monitor_refresh_ms, path_prepend, path_base,
                       nccl_env=None, extra=None):
    """{vars, start_env_script} for this node, from its roce_gid result and the role's settings."""
    if not isinstance(gid, Mapping):
        raise AnsibleFilterError("fabric_environment: the input must be a roce_gid result")
    for name, value in (("nccl_env", nccl_env), ("extra", extra)):
        if value is not None and not isinstance(value, Mapping):
            raise AnsibleFilterError("fabric_environment: %s must be a mapping, not %r" % (name, value))
    if isinstance(path_prepend, (str, bytes)):
        raise AnsibleFilterError("fabric_environment: path_prepend must be a list of directories")
    try:
        env = fabric.service_environment(ifname, address, cuda_home, memory_monitor_refresh_ms, path_prepend,
                                         path_base, dict(nccl_env or {}), dict(extra or {}))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("fabric_environment: %s" % exc)
    return {"vars": env, "start_env_script": fabric.start_script_for(env, gid.get("start_env_script"))}


class FilterModule(object):
    def filters(self):
        return {"fabric_environment": fabric_environment}
