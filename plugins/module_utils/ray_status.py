# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Parse the text `ray status` prints (Ray 2.x autoscaler summary); read the
nodes Ray's dashboard lists as alive."""

from __future__ import annotations

import json
import re
import time

from ansible.module_utils.urls import open_url

_NODE = re.compile(r"^\s*\d+\s+(node_[0-9a-f]+)\s*$")
_RESOURCE = re.compile(
    r"^\s*(?P<used>[0-9.]+)(?P<uunit>[A-Za-z]*)/(?P<total>[0-9.]+)(?P<tunit>[A-Za-z]*)\s+(?P<name>\S+)"
    r"(?:\s+\((?P<pg_used>[0-9.]+)[A-Za-z]* used of (?P<pg_reserved>[0-9.]+)[A-Za-z]* reserved in placement groups\))?\s*$"
)
_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}


def _amount(number, unit):
    return float(number) * _UNITS.get(unit, 1)


def free(resource):
    """What nobody holds: the total less what is used and what placement
    groups reserve but do not use yet."""
    held = resource["used"] + max(resource["reserved"] - resource.get("reserved_used", 0.0), 0.0)
    return max(resource["total"] - held, 0.0)


def parse(text):
    """Return active/pending node ids and resource usage.

    ``resources`` maps a resource name (CPU, GPU, memory, ...) to
    ``{"used": float, "total": float, "reserved": float}``, ``reserved`` being
    what placement groups hold (Ray 2.4x+ prints it after the total);
    byte-sized ones are in bytes.
    """
    section = None
    active, pending, failures, demands = [], [], [], []
    resources = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("Node status", "Resources") or stripped.startswith(("---", "===")):
            section = None
            continue
        if stripped.endswith(":"):
            # Headings: "Active:", "Pending:", "Recent failures:", "Usage:" or
            # "Total Usage:" (by Ray version); any other one ends a section.
            heading = stripped[:-1].lower()
            if heading.endswith("usage"):
                section = "usage"
            elif heading.endswith("demands"):
                section = "demands"
            else:
                section = heading
            continue
        if section in ("active", "pending"):
            match = _NODE.match(line)
            if match:
                (active if section == "active" else pending).append(match.group(1))
        elif section in ("recent failures", "demands"):
            if stripped and not stripped.startswith("("):
                (failures if section == "recent failures" else demands).append(stripped)
        elif section == "usage":
            match = _RESOURCE.match(line)
            if match:
                resources[match.group("name")] = {
                    "used": _amount(match.group("used"), match.group("uunit")),
                    "total": _amount(match.group("total"), match.group("tunit")),
                    "reserved": _amount(match.group("pg_reserved") or 0, match.group("tunit")),
                    "reserved_used": _amount(match.group("pg_used") or 0, match.group("tunit")),
                }
    return {
        "active_nodes": active,
        "pending_nodes": pending,
        "recent_failures": failures,
        "pending_demands": demands,
        "resources": resources,
    }


def alive_hosts(dashboard_url, token=None, timeout=5, opener=open_url):
    """The sorted host names of the nodes Ray lists as alive, from its dashboard
    (Ray 2.60's node_head.py: GET /nodes?view=hostNameList, the nodes whose
    state is ALIVE, answered as {"result", "msg", "data": {"hostNameList"}}),
    with the cluster's token as a Bearer token. One HTTP request on the head,
    where `ray status` starts a Python process. Raises on any error."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    response = opener(dashboard_url.rstrip("/") + "/nodes?view=hostNameList", headers=headers, timeout=timeout,
                      follow_redirects="none")
    body = json.loads(response.read().decode("utf-8"))
    hosts = (body.get("data") or {}).get("hostNameList") if isinstance(body, dict) and body.get("result") else None
    if not isinstance(hosts, list):
        raise ValueError("Ray's dashboard did not list the nodes: %s" % json.dumps(body)[:300])
    return sorted(str(host) for host in hosts)


def wait_alive_hosts(dashboard_url, token, count, within, timeout=5, opener=open_url, clock=time.monotonic,
                     sleep=time.sleep):
    """alive_hosts() once it lists at least ``count`` nodes, asking again every
    second for at most ``within`` seconds; the last list (or the last error)
    when it does not. Ray's dashboard learns of a node that joined a few
    seconds after `ray status` lists it."""
    deadline = clock() + within
    while True:
        try:
            hosts = alive_hosts(dashboard_url, token, timeout, opener)
        except Exception:  # a dashboard not up yet: ask again until the deadline
            if clock() >= deadline:
                raise
            hosts = None
        if hosts is not None and (len(hosts) >= count or clock() >= deadline):
            return hosts
        sleep(1)


def summary(rc, out):
    """The result fields of one `ray status` run (rc, stdout): reachable, the
    active nodes' count, the GPUs (total, used, reserved, free) and parse()'s keys."""
    parsed = parse(out if rc == 0 else "")
    gpu = parsed["resources"].get("GPU", {"used": 0.0, "total": 0.0, "reserved": 0.0, "reserved_used": 0.0})
    return dict(reachable=rc == 0, node_count=len(parsed["active_nodes"]), gpus_total=gpu["total"],
                gpus_used=gpu["used"], gpus_reserved=gpu["reserved"], gpus_free=free(gpu), stdout=out, **parsed)
