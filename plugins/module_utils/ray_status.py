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


WAIT_DELAY = 2


def result_of(rc, out):
    """The result fields of one `ray status` run (the ray_status module's RETURN)."""
    parsed = parse(out if rc == 0 else "")
    gpu = parsed["resources"].get("GPU", {"used": 0.0, "total": 0.0, "reserved": 0.0, "reserved_used": 0.0})
    return dict(
        reachable=rc == 0,
        node_count=len(parsed["active_nodes"]),
        gpus_total=gpu["total"],
        gpus_used=gpu["used"],
        gpus_reserved=gpu["reserved"],
        gpus_free=free(gpu),
        stdout=out,
        **parsed
    )


def wait_done(result, rc, wait_free_gpus=0, wait_nodes=0, wait_gpus=0):
    """Whether a wait is over: what it waits for is there (a GPU wait also
    ends when the head does not answer; a node wait goes on)."""
    if wait_nodes > 0 or wait_gpus > 0:
        if rc != 0 or result["node_count"] < wait_nodes or result["gpus_total"] < wait_gpus:
            return False
    return rc != 0 or result["gpus_free"] >= wait_free_gpus


def read(module, ray_bin, address, timeout=60, wait_free_gpus=0, wait_nodes=0, wait_gpus=0, wait_timeout=30,
         wait_delay=WAIT_DELAY, clock=time.monotonic, sleep=time.sleep):
    """The one reader of `ray status --address ADDRESS` (the ray_status module
    and the ray_cluster probe): each run bounded by ``timeout`` seconds; with
    ``wait_free_gpus``, ``wait_nodes`` or ``wait_gpus``, polled every
    ``wait_delay`` s until they are there, the whole wait bounded by
    ``wait_timeout`` (a `ray status` against a head that is gone takes its
    whole timeout, so each gets at most the time left). The result_of() the
    last run, with ``waited`` (s), ``rc`` and, when it failed, ``stderr_tail``."""
    if "/" not in ray_bin:
        ray_bin = module.get_bin_path(ray_bin, required=True)
    waiting = wait_free_gpus > 0 or wait_nodes > 0 or wait_gpus > 0
    start = clock()
    deadline = start + max(0, wait_timeout)
    while True:
        left = int(deadline - clock()) if waiting else timeout
        argv = ["timeout", str(max(5, min(timeout, left))), ray_bin, "status", "--address", address]
        rc, out, err = module.run_command(argv, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
        result = result_of(rc, out)
        if wait_done(result, rc, wait_free_gpus, wait_nodes, wait_gpus) or clock() + wait_delay > deadline:
            break
        sleep(wait_delay)
    result["waited"] = round(clock() - start, 1) if waiting else 0.0
    result["rc"] = rc
    if rc != 0:
        result["stderr_tail"] = (err or "").strip().splitlines()[-5:]
    return result


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
