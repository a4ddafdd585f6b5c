# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The ray_cluster role's read of a node, in one module call (ray_cluster_probe).

Reads the node's raylet unit as systemd_run_service would (the same
``systemd_run.Service`` code, planning only: ``systemctl --user show`` with
ActiveState and SubState, the unit file, the start-env script and the
secret environment file against what the controller rendered, the processes
a signal stopped, the running process's resolved variables), the Ray token
file (its digest, generation and mode: never the token), lingering, and on
the head `ray status` (ray_status.read, bounded). Decides what differs and
returns one line per difference; changes nothing.

``actions`` is the controller's half (filter ray_cluster_actions): the head's
token against each worker's, which it cannot see from the worker.
"""

from __future__ import annotations

import hashlib
import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import files, linger, ray_auth, ray_status, status_reports
from ansible_collections.laguna.spark.plugins.module_utils import systemd_run

# systemd_run_service's options the planner needs, with that module's defaults.
SERVICE_DEFAULTS = {
    "state": "started", "environment": {}, "properties": {}, "description": "laguna-spark service",
    "working_directory": None, "settle": 3, "runtime_dir": None, "persistent": False, "after": [],
    "restart_sec": 10, "restart": "always", "start_limit_interval": 600, "start_limit_burst": 20,
    "start_env_script": None, "start_env_keys": [], "unit_dir": None, "secret_environment": {},
}


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12] if text is not None else "none"


class _Planner(object):
    """The module as systemd_run.Service sees it, in check mode: it decides and acts on nothing."""

    check_mode = True
    _diff = True

    def __init__(self, module, params):
        self._module = module
        self.params = params

    def __getattr__(self, name):
        return getattr(self._module, name)


def plan_unit(module, params):
    """What systemd_run_service with ``params`` would do: (whether it would change the unit,
    differences, the service: its ``result`` holds the action it would take)."""
    params = dict(SERVICE_DEFAULTS, **{k: v for k, v in params.items() if v is not None})
    service = systemd_run.Service(_Planner(module, params))
    environment = {str(k): str(v) for k, v in params["environment"].items()}
    properties = {str(k): str(v) for k, v in params["properties"].items()}
    if params["persistent"]:
        service.persistent(dict(environment), properties)
    else:
        service.transient(dict(environment), properties)
    return service.result["changed"], unit_differences(service, params), service


def unit_differences(service, params):
    """One line per way the unit differs from what the role wants (empty when it runs as wanted)."""
    unit, current, result = service.unit, service.current, service.result
    found = []
    if not service.running:
        state = current.get("ActiveState") or "inactive"
        if current.get("LoadState") in (None, "", "not-found"):
            found.append("%s: not loaded, wanted running" % unit)
        else:
            found.append("%s: ActiveState %s (SubState %s, Result %s), wanted active"
                         % (unit, state, current.get("SubState") or "-", current.get("Result") or "-"))
    if service.stopped:
        found.append("%s: active but its processes %s are stopped (SIGSTOP), wanted running"
                     % (unit, ", ".join(str(pid) for pid in service.stopped)))
    if service.running and service.previous != result.get("fingerprint"):
        found.append("%s: configuration fingerprint %s, wanted %s"
                     % (unit, service.previous or "none", result.get("fingerprint")))
    if params["persistent"]:
        diff = result.get("diff") or {}
        if service.running and not service.from_file:
            found.append("%s: runs as a transient unit, wanted from %s" % (unit, service.unit_path))
        if diff.get("before") != diff.get("after"):
            found.append("%s: unit file %s sha256 %s, wanted %s" % (
                unit, service.unit_path, sha(diff.get("before")) if diff.get("before") else "missing",
                sha(diff.get("after"))))
        script = params["start_env_script"]
        if script is not None and files.read_text(service.script_path) != script:
            found.append("%s: start-env script %s differs from the rendered one" % (unit, service.script_path))
        if current.get("UnitFileState") != "enabled":
            found.append("%s: UnitFileState %s, wanted enabled" % (unit, current.get("UnitFileState") or "-"))
        for key, values in sorted((result.get("start_env_drift") or {}).items()):
            found.append("%s: %s of the running process is %s, wanted %s"
                         % (unit, key, values["have"], values["want"]))
    elif service.has_file:
        found.append("%s: unit file %s is there, wanted a transient unit" % (unit, service.unit_path))
    if service.secret_text is not None:
        found.append("%s: secret environment file %s %s" % (
            unit, service.secret_path,
            "differs from the wanted one" if os.path.exists(service.secret_path) else "is missing"))
    elif not params["secret_environment"] and os.path.exists(service.secret_path):
        found.append("%s: secret environment file %s is left over" % (unit, service.secret_path))
    if result.get("changed") and not found:
        found.append("%s: would be %s" % (unit, result.get("action")))
    return found


def read_token(path, generation=None, is_head=False):
    """The token file as the role compares it: digest (never the token), generation, mode,
    and on the head why the make task would change it (ray_auth.plan, as ray_auth_token decides)."""
    have = ray_auth.read(path)
    mode = files.file_mode(path, 0o777)
    reason = None
    if is_head:
        reason = ray_auth.plan(path, None, generation)["reason"]
    if reason is None and have is not None and mode != 0o600:
        reason = "mode %s" % oct(mode or 0)[2:].zfill(4)
    return {"exists": have is not None, "digest": ray_auth.digest(have), "generation": ray_auth.read_generation(path),
            "mode": "%04o" % mode if mode is not None else None, "reason": reason}, have


def probe(module, params):
    """Everything the ray_cluster role checks on this node (see the module's RETURN)."""
    unit = dict(params["unit"])
    differences = []
    token, have = {}, None
    if params["token_path"]:
        token, have = read_token(params["token_path"], params["token_generation"], params["is_head"])
        if token["reason"]:
            differences.append("Ray token %s: %s" % (params["token_path"], token["reason"]))
        # The unit's secret environment holds the token: the one in the file (the
        # controller compares it with the head's and restarts the unit when it changes).
        unit["secret_environment"] = {params["secret_name"]: have} if have else {}
    else:
        unit["secret_environment"] = {}
    change, unit_found, service = plan_unit(module, unit)
    differences.extend(unit_found)
    current = service.current
    loginctl = module.get_bin_path("loginctl")
    linger_state = (linger.read(module.run_command, pwd.getpwuid(os.getuid()).pw_name, loginctl=loginctl)
                    ["report"]["linger"] if loginctl else "unknown")
    status = {}
    if params["is_head"] and params["ray"] and not change:
        # A head that restarts makes a new cluster: its `ray status` now tells nothing.
        status = ray_status.read(module, params["ray"], params["address"], params["status_timeout"])
        status.pop("stdout", None)
        if status.get("rc"):
            differences.append("ray status at %s: unreachable (%s)"
                               % (params["address"], " | ".join(status.get("stderr_tail") or [])))
        elif (status["node_count"] < params["expected_nodes"]
              or status["gpus_total"] < params["expected_gpus"]):
            differences.append("ray status at %s: %d of %d node(s) and %s of %s GPU(s)" % (
                params["address"], status["node_count"], params["expected_nodes"], status["gpus_total"],
                params["expected_gpus"]))
    return {
        "differences": differences,
        "change": change,
        "action": service.result["action"],
        "unit": service.unit,
        "active_state": current.get("ActiveState") or "inactive",
        "sub_state": current.get("SubState") or "dead",
        "result": current.get("Result") or "success",
        "loaded": current.get("LoadState", "not-found") not in ("not-found", ""),
        "unit_file_state": current.get("UnitFileState") or "",
        "stopped_pids": service.stopped,
        "fingerprint": service.result.get("fingerprint"),
        "previous_fingerprint": service.previous,
        "token": token,
        "linger": linger_state,
        "ray_status": status,
        "ray_status_ok": bool(status) and not status.get("rc") and status["node_count"] >= params["expected_nodes"]
        and status["gpus_total"] >= params["expected_gpus"],
    }


def actions(probe_result, head_probe, is_head, auth):
    """The controller's decisions from this node's probe and the head's (None
    when the head is not in the play: --limit): {token_install (a worker),
    token_make (the head), unit (run the raylet task), restart (the token
    the raylet holds changes: restart it, which check mode then names too; a
    real run restarts it for its new secret anyway), needs_token (read the
    token for these tasks), token_differs (a line, or None)}.

    A worker's token must be the head's: one the head is about to make or
    rotate, or one whose digest differs, is installed, and the raylet, whose
    secret environment holds it, restarts. Without the head's probe nothing
    is known: every task runs and decides for itself, as before the probe."""
    found = _actions(probe_result, head_probe, is_head, auth)
    found["needs_token"] = bool(auth) and (found["token_install"] or found["unit"])
    return found


def _actions(probe_result, head_probe, is_head, auth):
    probe_result = probe_result or {}
    token = probe_result.get("token") or {}
    head_token = (head_probe or {}).get("token") or {}
    unit = bool(probe_result.get("change", True))
    if not auth:
        return {"token_make": False, "token_install": False, "unit": unit, "restart": False, "token_differs": None}
    if is_head:
        make = bool(token.get("reason")) or not probe_result
        return {"token_make": make, "token_install": False, "unit": unit or make,
                "restart": _new_token(token.get("reason")), "token_differs": None}
    if not head_probe:
        return {"token_make": True, "token_install": True, "unit": True, "restart": False,
                "token_differs": "Ray token: the head is not in this play; installed from its file"}
    differs = None
    if _new_token(head_token.get("reason")):
        differs = "Ray token: the head's changes (%s)" % head_token["reason"]
    elif token.get("digest") != head_token.get("digest"):
        differs = "Ray token: sha256 %s, the head's %s" % (token.get("digest") or "missing", head_token.get("digest"))
    install = differs is not None or bool(token.get("reason"))
    return {"token_make": bool(head_token.get("reason")), "token_install": install,
            "unit": unit or differs is not None, "restart": differs is not None, "token_differs": differs}


def _new_token(reason):
    """Whether ray_auth_token's reason makes a new token (missing, rotated), not only its mode."""
    return bool(reason) and not reason.startswith("mode ")


def quiet_report(nodes, head_probe, expected_nodes, expected_gpus, address, gid_index=None, persistent=False):
    """The role's cluster report (status_reports.ray_cluster, as tasks/status.yml builds it) from the
    probes alone, when they tell the whole story: the head's probe read `ray status` showing every
    node and GPU, and no node's probe (``nodes``: {host, probe, actions} of each node in the play)
    found anything to do. Else {}: the role waits for the cluster and reads it again."""
    head_probe = head_probe or {}
    if not head_probe.get("ray_status_ok"):
        return {}
    rows = []
    for node in nodes:
        probe_result, todo = node.get("probe") or {}, node.get("actions") or {}
        if (not probe_result or probe_result.get("differences") or todo.get("unit") or todo.get("token_install")
                or todo.get("token_make")):
            return {}
        rows.append({"host": node["host"], "unit": probe_result.get("unit", "").rsplit(".service", 1)[0],
                     "state": probe_result.get("active_state"), "result": probe_result.get("result"),
                     "linger": probe_result.get("linger"), "loaded": probe_result.get("loaded")})
    return status_reports.ray_cluster(rows, head_probe["ray_status"], expected_nodes, expected_gpus, address,
                                      gid_index, persistent)
