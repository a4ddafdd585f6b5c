# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The record a complete, successful site run leaves on each node, and the
comparison a later run makes with it to skip the roles when nothing they
would look at has changed (the fast no-op path).

A record holds a fingerprint of the run's inputs (the collection's files and
every laguna.spark variable), the evidence spec (what to look at) and the
evidence itself: the boot, the service user, the user units' identities, the
stat of every file in the given trees (size, mtime, ctime, inode: a write of
any kind changes ctime), the RoCE GID tables, small sysfs attributes and the
processes matching a pattern, the PIDs holding the GPU (nvidia-smi's compute
apps). URLs are not recorded: they must answer now.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import files, procs, roce

FORMAT = 1
# UnitFileState: a persistent unit disabled by hand would not come back after a
# reboot; systemd_run_service enables it again.
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "InvocationID", "Description", "UnitFileState")
# What the fabric role checks of every RoCE twin, read from <sysfs_net>/<netdev>/.
NETDEV_ATTRIBUTES = ("mtu", "operstate")


def fingerprint(inputs):
    """sha256 of the inputs as canonical JSON (key order does not matter)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stat_of(path):
    """[size, mtime_ns, ctime_ns, inode, mode] of ``path`` (not followed), or None when it is missing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]


def tree(path, limit):
    """{relative path: stat} of ``path`` and everything under it (symlinks not
    followed), at most ``limit`` entries; raises ValueError past the limit."""
    found = {".": stat_of(path)}
    if found["."] is None or not os.path.isdir(path):
        return found
    for root, dirs, filenames in os.walk(path):
        dirs.sort()
        for name in sorted(dirs) + sorted(filenames):
            full = os.path.join(root, name)
            found[os.path.relpath(full, path)] = stat_of(full)
            if len(found) > limit:
                raise ValueError("%s holds more than %d entries" % (path, limit))
    return found


def expand(pattern):
    """The paths a glob pattern names (sorted), or the pattern itself when nothing matches."""
    return sorted(glob.glob(pattern)) or [pattern]


def netdev_reads(sysfs_net, netdevs):
    """The sysfs files of ``netdevs`` (each RoCE twin) whose contents are recorded."""
    return [os.path.join(sysfs_net, name, attr) for name in netdevs for attr in NETDEV_ATTRIBUTES]


def gid_table(sysfs_root, hca, port):
    try:
        return [[e["index"], e["gid"], e["type"], e["ndev"]] for e in roce.scan_gids(sysfs_root, hca, port)]
    except (OSError, ValueError):
        return None


def gather(spec, units=None, proc="/proc", exclude=(), gpu=None, ray=None):
    """The evidence ``spec`` asks for, as plain JSON data.

    ``units`` is a callable (unit name -> {property: value}) that asks the
    user manager; ``exclude`` are PIDs to leave out of the process scan (the
    module itself and its parent); ``gpu`` a callable (nvidia-smi -> the
    sorted PIDs holding the GPU, or {"error": ...}); ``ray`` a callable
    (spec's ray_dashboard -> the host names Ray lists as alive, or {"error": ...}).
    """
    limit = spec.get("tree_limit", 100000)
    evidence = {"boot_id": files.read_text(os.path.join(proc, "sys/kernel/random/boot_id"),
                                           strip=True, undecodable=files.DEFAULT)}
    try:
        user = pwd.getpwuid(os.getuid())
        evidence["user"] = [user.pw_name, user.pw_uid, user.pw_gid, user.pw_dir]
    except KeyError:
        evidence["user"] = [None, os.getuid()]
    if spec.get("units"):
        evidence["units"] = dict((name, units(name)) for name in spec["units"])
        # The same test as systemd_run_service's, which restarts such a unit.
        evidence["stopped"] = dict((name, procs.stopped(name, proc=proc)) for name in spec["units"])
    for key, recurse in (("trees", True), ("paths", False)):
        if spec.get(key):
            evidence[key] = {}
            for pattern in spec[key]:
                for path in expand(pattern):
                    evidence[key][path] = tree(path, limit) if recurse else stat_of(path)
    if spec.get("reads"):
        evidence["reads"] = dict((path, files.read_text(path, strip=True, undecodable=files.DEFAULT))
                                 for pattern in spec["reads"] for path in expand(pattern))
    if spec.get("gid_tables"):
        evidence["gid_tables"] = [gid_table(t["sysfs_root"], t["hca"], t["port"]) for t in spec["gid_tables"]]
    if spec.get("processes"):
        evidence["processes"] = dict(
            (pattern, sorted(p["pid"] for p in procs.matching(pattern, proc=proc, exclude=exclude)))
            for pattern in spec["processes"])
    if spec.get("nvidia_smi") and gpu:
        evidence["gpu_holders"] = gpu(spec["nvidia_smi"])
    if spec.get("ray_dashboard") and ray:
        evidence["ray_hosts"] = ray(spec["ray_dashboard"])
    return evidence


def _describe(key, name, was, now):
    if key == "units":
        changed = sorted(p for p in set(was or {}) | set(now or {}) if (was or {}).get(p) != (now or {}).get(p))
        return "unit %s changed (%s)" % (name, ", ".join(
            "%s %s -> %s" % (p, (was or {}).get(p), (now or {}).get(p)) for p in changed if p != "Description")
            or "its description")
    if key in ("trees",):
        if was is None or now is None:
            return "%s %s" % (name, "appeared" if was is None else "is gone")
        entries = sorted(p if p != "." else "the directory itself"
                         for p in set(was) | set(now) if was.get(p) != now.get(p))
        shown = ", ".join(entries[:3]) + (" and %d more" % (len(entries) - 3) if len(entries) > 3 else "")
        return "%s changed: %s" % (name, shown)
    singular = {"paths": "path", "reads": "file", "processes": "processes matching"}.get(key, key)
    return "%s %s changed" % (singular, name)


def compare(recorded, now):
    """Sentences naming each difference between two evidence dicts (empty: the same)."""
    reasons = []
    for key in sorted(set(recorded) | set(now)):
        was, cur = recorded.get(key), now.get(key)
        if was == cur or key == "stopped":  # stopped processes: not_running() names them
            continue
        if isinstance(was, dict) and isinstance(cur, dict):
            for name in sorted(set(was) | set(cur)):
                if was.get(name) != cur.get(name):
                    reasons.append(_describe(key, name, was.get(name), cur.get(name)))
        elif key == "boot_id":
            reasons.append("the node has restarted since the last full run")
        elif key == "gpu_holders":
            reasons.append("the processes holding the GPU changed (%s -> %s)" % (was, cur))
        elif key == "ray_hosts":
            reasons.append("the nodes Ray lists as alive changed (%s -> %s)" % (_hosts(was), _hosts(cur)))
        else:
            reasons.append("%s changed" % key.replace("_", " "))
    return reasons


def _hosts(found):
    if isinstance(found, list):
        return ", ".join(found) or "none"
    return (found or {}).get("error") or "unknown"


def unreadable(evidence):
    """Sentences for evidence that could not be read: a record of it would
    vouch for nothing (Ray's nodes, when its dashboard did not answer)."""
    found = evidence.get("ray_hosts")
    if isinstance(found, dict):
        return ["cannot read which nodes Ray lists as alive: %s" % found.get("error")]
    return []


def not_running(evidence):
    """Sentences for each recorded unit that is not active now, or whose
    processes a signal stopped (a frozen raylet: Ray drops the node while
    its unit stays active)."""
    reasons = ["unit %s is %s" % (name, props.get("ActiveState") or "unknown")
               for name, props in sorted((evidence.get("units") or {}).items()) if props.get("ActiveState") != "active"]
    return reasons + ["unit %s is active but its process%s %s %s stopped (SIGSTOP): a run restarts it"
                      % (name, "es" if len(pids) > 1 else "", ", ".join(str(p) for p in pids),
                         "are" if len(pids) > 1 else "is")
                      for name, pids in sorted((evidence.get("stopped") or {}).items()) if pids]


def digests(inputs):
    """{part: sha256} of each part of the inputs, each variable on its own
    (kept in the record, so that a check can name what changed)."""
    found = {}
    for key, value in (inputs or {}).items():
        if key == "variables" and isinstance(value, dict):
            for name, item in value.items():
                found["variable " + name] = fingerprint(item)
        else:
            found[key] = fingerprint(value)
    return found


def changed_inputs(was, now, most=8):
    """The parts of the inputs whose digests differ, as one phrase."""
    names = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    shown = ", ".join(names[:most])
    return shown + (" and %d more" % (len(names) - most) if len(names) > most else "")


def stale(record, inputs_fingerprint, inputs_digests=None):
    """Why a record cannot vouch for this run before any evidence is read
    (missing, another format, other inputs); empty when it can."""
    if not record:
        return ["no record of a complete run on this node"]
    if record.get("format") != FORMAT:
        return ["the record was written by another version of the collection"]
    if record.get("fingerprint") != inputs_fingerprint:
        which = changed_inputs(record.get("digests") or {}, inputs_digests or {}) \
            if record.get("digests") and inputs_digests else ""
        return ["the inputs (the collection or a laguna.spark variable) changed since the last full run"
                + (": " + which if which else "")]
    return []


def check(record, inputs_fingerprint, now, inputs_digests=None):
    """(converged, reasons) of a record against this run's fingerprint and the evidence gathered now."""
    reasons = stale(record, inputs_fingerprint, inputs_digests)
    if not reasons:
        reasons = compare(record.get("evidence") or {}, now) + not_running(now)
    return not reasons, reasons


def everywhere(results):
    """Whether the run may end on the fast path: every host's check result (the
    laguna role's laguna_converged) says converged. A host without one, or
    whose check failed or could not reach it, is not converged."""
    return all(isinstance(result, dict) and bool(result.get("converged")) for result in results)


def make_record(inputs_fingerprint, spec, evidence, inputs_digests=None):
    return {"format": FORMAT, "fingerprint": inputs_fingerprint, "spec": spec, "evidence": evidence,
            "digests": inputs_digests or {}}


def load(path):
    """The record at ``path``, or None when it is missing or unreadable."""
    data = files.read_json(path)
    return data if isinstance(data, dict) else None
