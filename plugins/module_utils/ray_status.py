# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Parse the text `ray status` prints (Ray 2.x autoscaler summary)."""

from __future__ import annotations

import re

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
