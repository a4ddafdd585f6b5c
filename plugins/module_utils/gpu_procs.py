# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Which processes hold a node's GPU, and whether the cluster's own units run them.

``nvidia-smi --query-compute-apps=pid,process_name,used_memory
--format=csv,noheader,nounits`` lists every process with a CUDA context: one
line per process, the fields separated by ", ", nothing at all when none
(tests/doubles/recorded/nvidia-smi). On a GB10 the GPU shares the node's
121 GiB with everything else, so a process outside the cluster's units that
holds it (a notebook, a training job, a second vLLM in a container) takes
memory that vLLM counted on.
"""

from __future__ import annotations

import pwd

from ansible_collections.laguna.spark.plugins.module_utils import procs
from ansible_collections.laguna.spark.plugins.module_utils.systemd_user import unit_name

FIELDS = "pid,process_name,used_memory"
QUERY = ["--query-compute-apps=" + FIELDS, "--format=csv,noheader,nounits"]


def _mib(text):
    """used_memory without units: an integer, or None for [N/A] / [Not Supported]."""
    text = text.strip()
    if text.endswith("MiB"):
        text = text[:-3].strip()
    try:
        return int(text)
    except ValueError:
        return None


def parse(text):
    """[{pid, name, used_mib}] from the CSV lines; raises ValueError on a line that is not one."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No running processes"):
            continue
        pid, sep, rest = line.partition(", ")
        name, sep2, used = rest.rpartition(", ")
        if not (sep and sep2) or not pid.isdigit():
            raise ValueError("not a pid, process_name, used_memory line: %r" % line)
        found.append({"pid": int(pid), "name": name, "used_mib": _mib(used)})
    return found


def query(run_command, smi, timeout):
    """(processes, error) of nvidia-smi's compute-apps query, bounded by coreutils' timeout.

    ``run_command`` is AnsibleModule.run_command; ``error`` is "" on success.
    """
    rc, out, err = run_command(["timeout", str(timeout), smi] + QUERY)
    if rc == 124:
        return None, ("did not answer within %d s: is the driver wedged? (nvidia-smi hangs when it is; "
                      "a reboot clears it)" % timeout)
    if rc != 0:
        return None, "failed (rc=%d): %s" % (rc, (err or out).strip()[-500:])
    try:
        return parse(out), ""
    except ValueError as exc:
        return None, str(exc)


def _user(uid):
    if uid is None:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def classify(found, allowed_units, proc="/proc"):
    """Each process with its unit, owner and command line, and whether an allowed unit runs it.

    ``allowed_units`` are names with or without ``.service``. A process that
    ended since nvidia-smi listed it has no cgroup to read: it is left out.
    """
    allowed = {unit_name(u) for u in allowed_units}
    result = []
    for item in found:
        pid = item["pid"]
        line = procs.cmdline(pid, proc)
        uid = procs.owner_uid(pid, proc)
        if not line and uid is None:
            continue
        unit = procs.unit_of(pid, proc)
        result.append(dict(item, unit=unit, uid=uid, user=_user(uid), cmdline=line, owned=unit in allowed))
    return result


def describe(process):
    memory = "%d MiB" % process["used_mib"] if process["used_mib"] is not None else "memory not reported"
    return "PID %d (%s; unit %s, user %s, %s)" % (
        process["pid"], (process["cmdline"] or process["name"])[:120], process["unit"] or "none",
        process["user"] or "?", memory)


def message(foreign, allowed_units, node):
    """What a user reads when processes outside the cluster's units hold the GPU ('' if none)."""
    if not foreign:
        return ""
    them = "it" if len(foreign) == 1 else "them"
    return ("The GPU of %s is held by %s, outside the cluster's units (%s). On a GB10 the GPU shares the node's "
            "unified memory, so vLLM would start short of what it planned for or be killed later: stop %s "
            "(kill %s), or set vllm_serve_foreign_gpu_processes: warn to serve beside %s."
            % (node, "; ".join(describe(p) for p in foreign), ", ".join(allowed_units),
               them, " ".join(str(p["pid"]) for p in foreign), them))


def read(run_command, smi, allowed_units, node, timeout):
    """What the gpu_processes module reads: {processes, foreign, message,
    error}; ``error`` (else '') is why nvidia-smi gave no list, as a
    sentence; ``smi`` None is nvidia-smi not found."""
    if not smi:
        return dict(processes=[], foreign=[], message="",
                    error="nvidia-smi not found on %s; install the NVIDIA driver (run --tags preflight)." % node)
    found, error = query(run_command, smi, timeout)
    if error:
        return dict(processes=[], foreign=[], message="", error="%s %s on %s %s" % (smi, " ".join(QUERY), node, error))
    found = classify(found, allowed_units)
    foreign = [proc for proc in found if not proc["owned"]]
    return dict(processes=found, foreign=foreign, message=message(foreign, allowed_units, node), error="")
