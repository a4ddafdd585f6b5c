# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Processes from /proc: command lines, the systemd unit that owns them, the
sockets they listen on."""

from __future__ import annotations

import os
import re
import signal
import time

from ansible_collections.laguna.spark.plugins.module_utils.files import read_bytes, read_text
from ansible_collections.laguna.spark.plugins.module_utils.systemd_user import unit_name

_UNIT = re.compile(r"/([^/]+\.(?:service|scope))(?:/|$)")


def cmdline(pid, proc="/proc"):
    raw = read_bytes(os.path.join(proc, str(pid), "cmdline"))
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace") if raw else ""


def unit_of(pid, proc="/proc"):
    """The innermost systemd unit whose cgroup holds pid ("" if none)."""
    text = read_text(os.path.join(proc, str(pid), "cgroup")) or ""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        units = _UNIT.findall(path)
        if units:
            return units[-1]
    return ""


def owner_uid(pid, proc="/proc"):
    try:
        return os.stat(os.path.join(proc, str(pid))).st_uid
    except OSError:
        return None


def environment(pid, proc="/proc"):
    """The environment of process ``pid`` ({} when it cannot be read)."""
    try:
        raw = read_bytes(os.path.join(proc, str(int(pid)), "environ"))
    except (TypeError, ValueError):
        return {}
    pairs = (item.decode("utf-8", "replace").partition("=") for item in (raw or b"").split(b"\0") if item)
    return {key: value for key, sep, value in pairs if sep}


def state(pid, proc="/proc"):
    """The one-letter state of process ``pid`` (R, S, D, T, ...; "" when it is gone)."""
    text = read_text(os.path.join(proc, str(pid), "stat")) or ""
    fields = text.rpartition(")")[2].split()
    return fields[0] if ")" in text and fields else ""


def stopped(unit, proc="/proc", uid=None):
    """PIDs of the processes of systemd unit ``unit`` that a signal stopped
    (state T: SIGSTOP, SIGTSTP; a debugger's tracing stop, t, is left out),
    of user ``uid`` (default: this process's). A unit whose processes are
    stopped is active to systemd but does no work: a frozen raylet leaves
    the Ray cluster while its unit stays active."""
    name = unit_name(unit)
    uid = os.getuid() if uid is None else uid
    return [pid for pid in pids(proc)
            if state(pid, proc) == "T" and unit_of(pid, proc) == name and owner_uid(pid, proc) == uid]


def pids(proc="/proc"):
    return sorted(int(name) for name in os.listdir(proc) if name.isdigit())


def argvs(proc="/proc"):
    """(pid, [arg, ...]) of every process but this one."""
    me = os.getpid()
    for pid in pids(proc):
        if pid == me:
            continue
        raw = read_bytes(os.path.join(proc, str(pid), "cmdline"))
        if raw:
            yield pid, [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]


def matching(pattern, proc="/proc", exclude=()):
    """[{pid, cmdline, unit, uid}] of processes whose command line matches."""
    regex = re.compile(pattern)
    found = []
    for pid in pids(proc):
        if pid in exclude:
            continue
        line = cmdline(pid, proc)
        if line and regex.search(line):
            found.append({"pid": pid, "cmdline": line, "unit": unit_of(pid, proc), "uid": owner_uid(pid, proc)})
    return found


def strays(found, unit):
    """Processes not run by ``unit`` (a name with or without .service); with
    no unit, every process found."""
    if not unit:
        return list(found)
    name = unit_name(unit)
    return [p for p in found if p["unit"] != name]


def terminate(pid_list, timeout, kill=os.kill, alive=None, sleep=time.sleep):
    """SIGTERM, wait up to timeout seconds, then SIGKILL what is left.

    Returns the pids that needed SIGKILL.
    """
    alive = alive or _alive
    for pid in pid_list:
        try:
            kill(pid, signal.SIGTERM)
            # A stopped process (Ctrl-Z, SIGSTOP) gets SIGTERM only once it runs.
            kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    left = [p for p in pid_list if alive(p)]
    while left and time.monotonic() < deadline:
        sleep(0.2)
        left = [p for p in left if alive(p)]
    for pid in left:
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _alive(pid):
    return state(pid) not in ("", "Z")


def listeners(port, proc="/proc"):
    """[{pid, cmdline, unit, address, uid}] of processes listening on TCP port.

    A listening socket whose process this user cannot read (another user's,
    read without root: /proc/<pid>/fd is its owner's) is listed too, with
    ``pid`` None, its owner's ``uid`` (from /proc/net/tcp) and ``hidden``
    True: a port held is never reported free for want of permission."""
    inodes = {}
    for table in ("tcp", "tcp6"):
        text = read_text(os.path.join(proc, "net", table)) or ""
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            address, _sep, hexport = fields[1].rpartition(":")
            if int(hexport, 16) == port:
                inodes[fields[9]] = (address, int(fields[7]))
    found = []
    if not inodes:
        return found
    seen = set()
    for pid in pids(proc):
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            inode = target[8:-1] if target.startswith("socket:[") else None
            if inode in inodes:
                seen.add(inode)
                found.append({"pid": pid, "cmdline": cmdline(pid, proc), "unit": unit_of(pid, proc),
                              "address": inodes[inode][0], "uid": owner_uid(pid, proc)})
                break
    for inode, (address, uid) in sorted(inodes.items()):
        if inode not in seen:
            found.append({"pid": None, "cmdline": "", "unit": "", "address": address, "uid": uid, "hidden": True})
    return found


def describe_listener(found):
    """One listener in a sentence: its pid, command line and unit, or, when
    this user cannot read its process, its owner's uid."""
    if found.get("hidden"):
        return "a process of uid %d that uid %d cannot read (run as root to name it)" % (found["uid"], os.getuid())
    return "pid %d (%s, unit %s)" % (found["pid"], found["cmdline"][:120], found["unit"] or "none")


def port_holders(port, unit, proc="/proc"):
    """What the port_listeners module reads: {listeners, foreign, message};
    ``foreign`` the listeners not of ``unit`` (none when no unit), and
    ``message`` ('' when none) the sentence naming them."""
    found = listeners(port, proc)
    foreign = strays(found, unit) if unit else []
    text = ("Port %d is held by %s, not by %s: stop it, or set laguna_api_port to a free port."
            % (port, "; ".join(describe_listener(f) for f in foreign), unit)) if foreign else ""
    return dict(listeners=found, foreign=foreign, message=text)
