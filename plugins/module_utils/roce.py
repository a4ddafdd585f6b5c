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

from ansible_collections.laguna.spark.plugins.module_utils.files import list_dir, read_sysfs

ROCE_V2 = "RoCE v2"


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
        gid = read_sysfs(os.path.join(gids_dir, name))
        if _is_unset(gid):
            continue
        entries.append({
            "index": int(name),
            "gid": gid,
            "type": read_sysfs(os.path.join(base, "gid_attrs", "types", name)),
            "ndev": read_sysfs(os.path.join(base, "gid_attrs", "ndevs", name)),
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


def gid_sysfs_form(address):
    """The sysfs text of the RoCE v2 GID that maps IPv4 ``address``
    (``0000:0000:0000:0000:0000:ffff:c0a8:6401``, as the kernel's %pI6 prints it)."""
    packed = ipaddress.IPv4Address(address).packed
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(bytearray(packed))


def start_env_script(sysfs_root, hca, port, address, gid_type=ROCE_V2, variable="NCCL_IB_GID_INDEX"):
    """A POSIX sh script that finds, when it runs, the lowest ``gid_type`` GID
    index of ``hca``/``port`` that maps ``address`` (the rule of find_gid, and
    of the recipe's gid() function) and writes ``variable=<index>`` to the
    file named by its first argument; it exits 1, saying what it saw, when
    none does. A persistent unit runs it as ExecStartPre and reads the file
    as its EnvironmentFile, so the index is resolved anew at each start
    (after a reboot the kernel may number the GIDs differently)."""
    base = port_dir(sysfs_root, hca, port)
    for value in (base, gid_type, variable):
        if "'" in value or "\n" in value:
            raise ValueError("unsupported character in %r" % value)
    return "\n".join([
        "#!/bin/sh",
        "# Written by laguna.spark (roce_gid start_env_script): %s for %s on %s port %s."
        % (variable, address, hca, port),
        "set -u",
        "out=\"$1\"",
        "dir='%s'" % base,
        "want='%s'" % gid_sysfs_form(address),
        "for i in $(ls \"$dir/gids\" 2>/dev/null | grep -E '^[0-9]+$' | sort -n); do",
        "  [ \"$(cat \"$dir/gid_attrs/types/$i\" 2>/dev/null)\" = '%s' ] || continue" % gid_type,
        "  [ \"$(cat \"$dir/gids/$i\" 2>/dev/null)\" = \"$want\" ] || continue",
        "  mkdir -p \"$(dirname \"$out\")\" || exit 1",
        "  printf '%s=%%s\\n' \"$i\" > \"$out.tmp\" && mv -f \"$out.tmp\" \"$out\" && exit 0" % variable,
        "  exit 1",
        "done",
        "echo \"no %s GID on %s port %s maps %s (wanted $want in $dir)\" >&2" % (gid_type, hca, port, address),
        "exit 1",
        "",
    ])


def resolve(sysfs_root, hca, port, address, gid_type=ROCE_V2):
    """This node's ``gid_type`` GID index for ``address`` on ``hca``/``port``
    (the lowest, find_gid's rule): ({gid_index, gid, ndev, gids,
    start_env_script}, None), or ({gids}, the sentence saying what is wrong)
    when there is no GID table, the address is not IPv4 or no GID maps it.
    The modules roce_gid and fabric_probe (resolve_gid_type) report it."""
    try:
        entries = scan_gids(sysfs_root, hca, port)
    except FileNotFoundError as exc:
        return {"gids": []}, ("No GID table at %s: is HCA %r / port %d right? Devices present: %s"
                              % (exc, hca, port, ", ".join(list_dir(sysfs_root)) or "none"))
    try:
        match = find_gid(entries, address, gid_type)
    except ValueError:
        return {"gids": entries}, "address %r is not an IPv4 address" % address
    if match is None:
        return {"gids": entries}, ("No %s GID on %s port %d maps %s. GIDs seen: %s"
                                   % (gid_type, hca, port, address, describe(entries)))
    return {"gid_index": match["index"], "gid": match["gid"], "ndev": match["ndev"], "gids": entries,
            "start_env_script": start_env_script(sysfs_root, hca, port, address, gid_type)}, None
