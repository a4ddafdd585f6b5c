# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The preflight role's judgements of what its tasks read: the NVIDIA driver,
the free space for the checkpoints, the RoCE link (through the filters
preflight_driver, preflight_space and preflight_roce).

Each returns {"ok": bool, "msg": str}: the message of the failure, naming the
node, what was found and what is needed, or the one-line summary on success.
"""

from __future__ import annotations

from ansible.module_utils.compat.version import LooseVersion


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
