# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Read RoCE GID tables from sysfs.

The layout is the kernel's::

    <root>/<hca>/ports/<port>/gids/<index>             e.g. 0000:...:ffff:c0a8:6402
    <root>/<hca>/ports/<port>/gid_attrs/types/<index>  "RoCE v2" or "IB/RoCE v1"
    <root>/<hca>/ports/<port>/gid_attrs/ndevs/<index>  netdev name

Reading ``types/<n>`` of an unpopulated GID fails with EINVAL, so every read
is tolerant.
"""

from __future__ import annotations

import ipaddress
import os

ROCE_V2 = "RoCE v2"


def _read(path):
    try:
        with open(path, "r", encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def ipv4_of_gid(gid):
    """The IPv4 address a GID maps (``::ffff:a.b.c.d``), or None."""
    if not gid:
        return None
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped is not None else None


def _is_unset(gid):
    try:
        return not gid or ipaddress.IPv6Address(gid) == ipaddress.IPv6Address("::")
    except ValueError:
        return True


def port_dir(sysfs_root, hca, port):
    return os.path.join(sysfs_root, hca, "ports", str(port))


def scan_gids(sysfs_root, hca, port):
    """Every populated GID of one HCA port, sorted by index.

    Raises FileNotFoundError when the port has no ``gids`` directory.
    """
    base = port_dir(sysfs_root, hca, port)
    gids_dir = os.path.join(base, "gids")
    if not os.path.isdir(gids_dir):
        raise FileNotFoundError(gids_dir)
    entries = []
    for name in os.listdir(gids_dir):
        if not name.isdigit():
            continue
        gid = _read(os.path.join(gids_dir, name))
        if _is_unset(gid):
            continue
        entries.append({
            "index": int(name),
            "gid": gid,
            "type": _read(os.path.join(base, "gid_attrs", "types", name)),
            "ndev": _read(os.path.join(base, "gid_attrs", "ndevs", name)),
            "ipv4": ipv4_of_gid(gid),
        })
    return sorted(entries, key=lambda entry: entry["index"])


def find_gid(entries, address, gid_type=ROCE_V2):
    """The lowest-index entry of ``gid_type`` whose GID maps ``address``."""
    wanted = str(ipaddress.IPv4Address(address))
    for entry in entries:
        if entry["ipv4"] == wanted and entry["type"] == gid_type:
            return entry
    return None


def describe(entries):
    """One line per GID, for error messages."""
    if not entries:
        return "(no populated GIDs)"
    return "; ".join(
        "%d=%s [%s]%s" % (
            entry["index"], entry["gid"], entry["type"] or "type unreadable",
            " ipv4=%s" % entry["ipv4"] if entry["ipv4"] else "",
        )
        for entry in entries
    )
