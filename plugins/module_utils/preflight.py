# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The preflight role's probe (module preflight_info): what it reads on a node
and its judgements of it: the NVIDIA driver, the free space for the
checkpoints, the RoCE link, and what a run would change (stray processes,
cached pages of the model trees).

The judgements return {"ok": bool, "msg": str}: the message of the failure,
naming the node, what was found and what is needed, or the one-line summary
on success; the role asserts on them.
"""

from __future__ import annotations

import os

from ansible.module_utils.compat.version import LooseVersion
from ansible_collections.laguna.spark.plugins.module_utils import model_stage
from ansible_collections.laguna.spark.plugins.module_utils.files import nearest, read_sysfs


def _newer_or_equal(version, minimum):
    """LooseVersion(version) >= LooseVersion(minimum), as Ansible's `version(minimum, '>=')`
    compares; an empty or incomparable version is not."""
    if not version or not str(minimum):
        return False
    try:
        return LooseVersion(version) >= LooseVersion(str(minimum))
    except TypeError:  # "N/A" against "580": str against int
        return False


def driver(rc, stdout_lines, stderr, minimum, host):
    """The driver version `nvidia-smi --query-gpu=driver_version` printed, against ``minimum``.

    ``stderr`` is what explains a failed run (its stderr, or the error
    running it). The failure names the version found, or why it could not
    be read, and the minimum GB10 needs.
    """
    lines = list(stdout_lines or [])
    ok = rc == 0 and bool(lines) and _newer_or_equal(str(lines[0]).strip(), minimum)
    if ok:
        return {"ok": True, "msg": "driver %s" % lines[0]}
    found = (lines[0] if lines else "?") if rc == 0 else "not readable (%s)" % (stderr or "").strip()
    return {"ok": False, "msg": "%s: NVIDIA driver %s; GB10 needs %s or newer." % (host, found, minimum)}


def _gb(count):
    return round(count / 1e9, 1)


def space(free_bytes, staged_bytes, min_free_gb, where, host):
    """Is there room for the checkpoints where they go?

    ``free_bytes``: what df reports free for ``where``; ``staged_bytes``: the
    bytes of the checkpoints already staged there, which count as room. The
    need is ``min_free_gb`` GB (10^9) less those, never below 0.
    """
    free, staged = int(free_bytes), int(staged_bytes)
    needed = max(int(min_free_gb) * 1000 ** 3 - staged, 0)
    if free >= needed:
        return {"ok": True, "needed": needed, "msg": "%s GB free" % _gb(free)}
    return {"ok": False, "needed": needed,
            "msg": "%s: %s GB free for %s, %s GB needed (%s GB less %s GB already staged)."
                   % (host, _gb(free), where, _gb(needed), min_free_gb, _gb(staged))}


def roce(operstate, addresses, port_state, ifname, address, hca, port, host):
    """Is the RoCE link up, carrying this node's address, its RDMA port ACTIVE?

    ``operstate``: the netdev's sysfs operstate; ``addresses``: `ip -4 -o
    addr show dev <ifname>`; ``port_state``: the RDMA port's sysfs state
    ("4: ACTIVE"). Empty when they could not be read.
    """
    link, state = (operstate or "").strip(), (port_state or "").strip()
    carries = (" %s/" % address) in (addresses or "")
    if link == "up" and carries and "ACTIVE" in state:
        return {"ok": True, "msg": "%s up with %s, %s" % (ifname, address, state)}
    return {"ok": False, "msg": "%s: %s is %s, %s, RDMA port %s/%s is %s. Check the cable, `ip addr`, and `ibv_devinfo`."
                                % (host, ifname, link or "missing", ("has " if carries else "does not carry ") + address,
                                   hca, port, state or "missing")}


# --- What the probe (module preflight_info) reads, and what it finds to do ----------------------

def missing_executables(venv, names, exists=os.path.exists):
    """The names in ``names`` that are not in ``venv``/bin (in their order, once each)."""
    missing = []
    for name in names:
        if name not in missing and not exists(os.path.join(venv, "bin", name)):
            missing.append(name)
    return missing


def free_bytes(path):
    """(the nearest existing of ``path`` and its parents, the bytes free there for an unprivileged
    user), what `df -P -B1` prints as Available: f_bavail blocks of f_frsize bytes."""
    where = nearest(path, os.path.exists)
    stat = os.statvfs(where)
    return where, stat.f_bavail * stat.f_frsize


def staged_bytes(paths):
    """The bytes already staged in the checkpoint trees ``paths``, counted as model_stage_info
    counts its total_bytes (hf's .cache and *.incomplete files left out)."""
    return sum(model_stage.scan(path)["total_bytes"] for path in paths)


def roce_state(sysfs_net, ifname, sysfs_infiniband, hca, port):
    """(the netdev's operstate, the RDMA port's state) from sysfs, "" where unreadable."""
    return (read_sysfs(os.path.join(sysfs_net, ifname, "operstate")) or "",
            read_sysfs(os.path.join(sysfs_infiniband, hca, "ports", str(port), "state")) or "")


def run_as(user, current, runuser):
    """The argv prefix that runs a command as ``user`` from a process running as ``current``:
    nothing when they are the same, else ``runuser -u USER --``."""
    if user == current:
        return []
    return [runuser, "-u", user, "--"]


def ssh_argv(ssh, options, user, address):
    """The head's SSH check of one worker: ssh OPTIONS USER@ADDRESS true (as the role ran it)."""
    return [ssh] + list(options) + ["%s@%s" % (user, address), "true"]


def differences(host, strays, unit, page_cache):
    """One line per thing a run would change on ``host``: each process matching the stray
    pattern outside ``unit`` (it is stopped, or the run fails), and the model trees' cached
    pages (``page_cache``: the page_cache survey, None when the purge is off), dropped."""
    lines = ["%s: pid %d (%s) runs outside %s: %s" % (host, s["pid"], s["unit"] or "no unit", unit, s["cmdline"][:160])
             for s in strays]
    if page_cache and page_cache["cached_bytes"] > 0:
        lines.append("%s: %.2f GB of the model trees in the page cache, to drop"
                     % (host, page_cache["cached_bytes"] / 1e9))
    return lines
