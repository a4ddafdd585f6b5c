# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""verify_report: one node's health report in playbooks/verify.yml, from the
reports of the roles' status entry points and the playbook's own checks."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

_REPORTS = ("linger", "staging", "vllm_patch", "ray_cluster", "gpu", "ray_cluster_drift")
_HEAD_REPORTS = ("vllm_serve", "vllm_serve_drift")


def _node_of(cluster, host):
    for node in cluster.get("nodes") or []:
        if isinstance(node, Mapping) and node.get("host") == host:
            return node
    raise AnsibleFilterError("verify_report: the ray_cluster report has no node %s" % host)


def _monitoring(status):
    """The report's monitoring entry, and its problems: Prometheus did not answer (its msg), or alerts
    fire (its message)."""
    entry = {"firing": status.get("firing", []), "table": status.get("table", [])}
    if "rows" not in status:
        return entry, [status.get("msg")]
    return entry, ([status.get("message")] if status.get("firing") else [])


def verify_report(settings):
    """{host, role, gid_index, linger, staging, vllm_patch, ray_cluster, vllm_serve, gpu_processes,
    monitoring, drift, problems} of one node."""
    try:
        return _report(settings)
    except KeyError as exc:
        raise AnsibleFilterError("verify_report: a report lacks %s" % exc)


def _report(settings):
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("verify_report: the input must be a mapping of the node's reports")
    head = bool(settings.get("is_head"))
    wanted = _REPORTS + (_HEAD_REPORTS if head else ())
    missing = [name for name in wanted if not isinstance(settings.get(name), Mapping)]
    if missing:
        raise AnsibleFilterError("verify_report: %s must be the node's report(s)" % ", ".join(missing))
    host = settings.get("host")
    cluster, gpu = settings["ray_cluster"], settings["gpu"]
    ray_drift, vllm_drift = settings["ray_cluster_drift"], settings.get("vllm_serve_drift")
    monitored = bool(settings.get("monitoring")) and head
    monitoring, alerts = _monitoring(settings.get("monitoring_status") or {}) if monitored else (None, [])
    problems = (list(settings["linger"]["problems"]) + list(settings["staging"]["problems"])
                + list(settings["vllm_patch"]["problems"]))
    if gpu.get("foreign"):
        problems.append(gpu.get("message"))
    if head:
        problems += list(cluster["problems"]) + list(settings["vllm_serve"]["problems"])
    if ray_drift.get("running"):
        problems += list(ray_drift["problems"])
    if head and vllm_drift.get("running"):
        problems += list(vllm_drift["problems"])
    problems += alerts
    return {
        "host": host,
        "role": "head" if head else "worker",
        "gid_index": settings.get("gid_index"),
        "linger": settings["linger"],
        "staging": settings["staging"],
        "vllm_patch": settings["vllm_patch"],
        "ray_cluster": cluster if head else _node_of(cluster, host),
        "vllm_serve": settings.get("vllm_serve"),
        "gpu_processes": gpu.get("processes"),
        "monitoring": monitoring,
        "drift": list(ray_drift["differences"]) + (list(vllm_drift["differences"]) if head else []),
        "problems": problems,
    }


class FilterModule(object):
    def filters(self):
        return {"verify_report": verify_report}
