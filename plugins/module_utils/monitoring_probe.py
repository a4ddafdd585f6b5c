# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The monitoring role's probe: what the role checks on a node, read in one
call, and what of it differs from what the role wants.

The reads are the ones the role's tasks made one by one:

* the packages' dpkg status (venv_probe.read_packages: installed when
  ``dpkg-query -W -f '${db:Status-Status}'`` prints ``installed``), the
  packages an earlier run recorded as its own (``<state_dir>/installed.json``)
  and, for a package installed before the role, whether its /etc/default file
  was kept (``<state_dir>/<package>.default``);
* the role's own directory (a directory, root:root, 0755);
* the mount point of the models' file system and whether the venv's Ray can
  run its metrics agent (node_info(), also monitoring_node_info's read);
* each file the role writes, against the content the controller rendered:
  sha1 (as the copy module compares), owner, group and mode;
* each daemon's system unit (``systemctl show`` LoadState, ActiveState,
  SubState, UnitFileState): running (active or activating, as
  ansible.builtin.systemd_service's ``started`` sees it) and enabled (a
  UnitFileState for which ``systemctl is-enabled`` succeeds);
* on the head, whether Prometheus answers ``/-/ready`` (one GET).

decide() turns the reads into ``differences`` (one line each) and what the
role's later tasks act on: ``missing`` (apt), ``record`` (installed.json),
``defaults_to_keep``, ``state_dir_differs``, ``to_write`` (paths),
``units_to_run`` (units to start and enable) and ``ready`` (False: the role
waits for Prometheus).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.laguna.spark.plugins.module_utils import files, systemd_user
from ansible_collections.laguna.spark.plugins.module_utils.venv_probe import packages_missing, read_packages

# What Ray 2.60 imports to decide whether the agents are minimal (ray/_private/utils.py).
RAY_DEPS_CHECK = "import ray.dashboard.optional_deps"

# What the role reads of each unit: always ActiveState and SubState with what it needs.
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState")
# ansible.builtin.systemd_service's `started` leaves a unit in these states alone.
RUNNING_STATES = ("active", "activating")
# The UnitFileStates for which `systemctl is-enabled` exits 0 (what `enabled: true` leaves alone).
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient")

STATE_DIR_MODE = 0o755


# --- What monitoring_node_info reads ------------------------------------------------------------

def mountpoint(path):
    """The mount point of the file system holding ``path`` or, when it does not exist, its nearest existing parent."""
    return files.nearest(os.path.realpath(files.nearest(os.path.abspath(path), os.path.exists)), os.path.ismount)


def ray_agent_error(run_command, python):
    """Why the venv's Ray runs minimal agents ("" when it does not): the last line of the import's error.

    ``run_command`` is AnsibleModule.run_command (argv, environ_update) -> (rc, out, err)."""
    rc, _out, err = run_command([python, "-c", RAY_DEPS_CHECK], environ_update={"PYTHONDONTWRITEBYTECODE": "1"})
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return "" if rc == 0 else (lines[-1] if lines else "exit status %d" % rc)


def recorded(state_dir):
    """The packages an earlier run recorded as installed by the role (sorted; [] without a record)."""
    found = files.read_json(os.path.join(state_dir, "installed.json"), default=[])
    return sorted(str(p) for p in found) if isinstance(found, list) else []


def ray_metrics(run_command, python):
    """{python_found, ray_metrics, ray_metrics_error} of the venv's python."""
    found = os.access(python, os.X_OK)
    error = "%s does not exist" % python
    if found:
        error = ray_agent_error(run_command, python)
    return {"python_found": found, "ray_metrics": found and error == "", "ray_metrics_error": error}


def node_info(module, packages, path, python, state_dir):
    """monitoring_node_info's result: missing, recorded, mountpoint, python_found, ray_metrics(_error)."""
    if packages:
        module.get_bin_path("dpkg-query", required=True)
    statuses = read_packages(module, packages)
    result = {"packages": statuses, "missing": packages_missing(statuses), "recorded": recorded(state_dir),
              "mountpoint": mountpoint(path)}
    result.update(ray_metrics(module.run_command, python))
    return result


# --- Files and directories -------------------------------------------------------------------

def sha1(data):
    return hashlib.sha1(data).hexdigest()


def _uid(owner):
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        return None


def _gid(group):
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def _name(uid, lookup, attr):
    try:
        return getattr(lookup(uid), attr)
    except KeyError:
        return str(uid)


def read_file(path, content, mode="0644", owner="root", group="root"):
    """One file against what the role writes there: {path, exists, checksum, wanted_checksum, mode,
    owner, group, differences} (differences: the file's, one phrase each)."""
    wanted = sha1(content.encode("utf-8"))
    out = {"path": path, "exists": False, "checksum": None, "wanted_checksum": wanted, "mode": None,
           "owner": None, "group": None, "differences": []}
    try:
        st = os.lstat(path)
    except OSError:
        out["differences"].append("missing")
        return out
    out["exists"] = True
    if not stat.S_ISREG(st.st_mode):
        out["differences"].append("not a regular file")
        return out
    out.update(mode="%04o" % stat.S_IMODE(st.st_mode), owner=_name(st.st_uid, pwd.getpwuid, "pw_name"),
               group=_name(st.st_gid, grp.getgrgid, "gr_name"))
    data = files.read_bytes(path)
    if data is None:
        out["differences"].append("unreadable")
    else:
        out["checksum"] = sha1(data)
        if out["checksum"] != wanted:
            out["differences"].append("content differs (sha1 %s, wanted %s)" % (out["checksum"], wanted))
    if int(out["mode"], 8) != int(str(mode), 8):
        out["differences"].append("mode %s, wanted %s" % (out["mode"], mode))
    if st.st_uid != _uid(owner) or st.st_gid != _gid(group):
        out["differences"].append("owner %s:%s, wanted %s:%s" % (out["owner"], out["group"], owner, group))
    return out


def read_dir(path, mode=STATE_DIR_MODE, owner="root", group="root"):
    """What differs of a directory the role keeps (a list of phrases; [] when it is as wanted)."""
    try:
        st = os.stat(path)
    except OSError:
        return ["missing"]
    if not stat.S_ISDIR(st.st_mode):
        return ["not a directory"]
    found = []
    if stat.S_IMODE(st.st_mode) != mode:
        found.append("mode %04o, wanted %04o" % (stat.S_IMODE(st.st_mode), mode))
    if st.st_uid != _uid(owner) or st.st_gid != _gid(group):
        found.append("owner %s:%s, wanted %s:%s" % (_name(st.st_uid, pwd.getpwuid, "pw_name"),
                                                    _name(st.st_gid, grp.getgrgid, "gr_name"), owner, group))
    return found


def defaults_to_keep(packages, missing, recorded_packages, state_dir, lexists=os.path.lexists):
    """The packages installed before the role (not missing, not recorded) whose /etc/default file the
    role has not kept yet (no ``<state_dir>/<package>.default``: the copy task, force: false, writes
    only a missing one)."""
    return [p for p in packages if p not in missing and p not in recorded_packages
            and not lexists(os.path.join(state_dir, "%s.default" % p))]


# --- Units -----------------------------------------------------------------------------------

def show_argv(systemctl, unit):
    return [systemctl, "show", unit, "--property=" + ",".join(UNIT_PROPERTIES)]


def unit_name(name):
    return name if "." in name else name + ".service"


def read_unit(module, systemctl, name):
    """{LoadState, ActiveState, SubState, UnitFileState} of a system unit (values "" when unread)."""
    props = dict((key, "") for key in UNIT_PROPERTIES)
    if systemctl:
        rc, out, _err = module.run_command(show_argv(systemctl, unit_name(name)))
        if rc == 0:
            props.update((k, v) for k, v in systemd_user.parse_show(out).items() if k in props)
    return props


def unit_differences(props):
    """What differs of a daemon's unit from running and enabled (a list of phrases)."""
    if props.get("LoadState") != "loaded":
        return ["LoadState %s, wanted loaded" % (props.get("LoadState") or "unknown")]
    found = []
    if props.get("ActiveState") not in RUNNING_STATES:
        found.append("ActiveState %s (SubState %s), wanted active" % (props.get("ActiveState") or "unknown",
                                                                      props.get("SubState") or "unknown"))
    if props.get("UnitFileState") not in ENABLED_STATES:
        found.append("UnitFileState %s, wanted enabled" % (props.get("UnitFileState") or "unknown"))
    return found


# --- Prometheus ------------------------------------------------------------------------------

def read_ready(url, timeout, open_url):
    """"" when ``url`` (Prometheus's /-/ready) answers 200, else why not."""
    try:
        response = open_url(url, method="GET", timeout=timeout, follow_redirects="none")
        code = response.getcode() if hasattr(response, "getcode") else response.status
    except Exception as exc:  # urllib raises several unrelated types; an HTTPError carries its code
        return "%s: %s" % (url, exc)
    return "" if code == 200 else "%s: HTTP %s" % (url, code)


# --- The probe -------------------------------------------------------------------------------

def decide(read, packages, state_dir):
    """differences and what the role acts on, from the reads (keys as probe() returns them)."""
    lines = []
    if read["missing"]:
        lines.append("packages to install: %s" % ", ".join(read["missing"]))
    if read["state_dir_differences"]:
        lines.append("%s: %s" % (state_dir, ", ".join(read["state_dir_differences"])))
    record = sorted(set(read["missing"]) - set(read["recorded"]))
    if record:
        lines.append("%s/installed.json: to record %s" % (state_dir, ", ".join(record)))
    keep = read["defaults_to_keep"]
    if keep:
        lines.append("/etc/default files of packages installed before the role, to keep: %s" % ", ".join(keep))
    to_write = []
    for item in read["files"]:
        if item["differences"]:
            to_write.append(item["path"])
            lines.append("%s: %s" % (item["path"], ", ".join(item["differences"])))
    units_to_run = []
    for name, props in read["units"].items():
        found = unit_differences(props)
        if found:
            units_to_run.append(name)
            lines.append("%s: %s" % (unit_name(name), ", ".join(found)))
    if read["ready_error"]:
        lines.append("Prometheus is not ready: %s" % read["ready_error"])
    return {"differences": lines, "record": bool(record), "to_write": to_write, "units_to_run": units_to_run,
            "ready": not read["ready_error"]}


def probe(module, params, open_url=None):
    """Everything the monitoring role checks on a node, read in one call (module: an AnsibleModule;
    params: monitoring_probe's options), with decide()'s keys."""
    packages = params.get("packages") or []
    state_dir = params.get("state_dir")
    read = {"packages": {}, "missing": [], "recorded": [], "mountpoint": None, "python_found": False,
            "ray_metrics": False, "ray_metrics_error": "", "state_dir_differences": [], "defaults_to_keep": [],
            "files": [], "units": {}, "ready_error": ""}
    if packages:
        module.get_bin_path("dpkg-query", required=True)
        read["packages"] = read_packages(module, packages)
        read["missing"] = packages_missing(read["packages"])
    if state_dir:
        read["recorded"] = recorded(state_dir)
        read["state_dir_differences"] = read_dir(state_dir)
        read["defaults_to_keep"] = defaults_to_keep(packages, read["missing"], read["recorded"], state_dir)
    if params.get("path"):
        read["mountpoint"] = mountpoint(params["path"])
    if params.get("python"):
        read.update(ray_metrics(module.run_command, params["python"]))
    read["files"] = [read_file(f["path"], f["content"], f.get("mode") or "0644", f.get("owner") or "root",
                               f.get("group") or "root") for f in params.get("files") or []]
    units = params.get("units") or []
    systemctl = module.get_bin_path("systemctl") if units else None
    read["units"] = dict((name, read_unit(module, systemctl, name)) for name in units)
    if params.get("ready_url"):
        read["ready_error"] = read_ready(params["ready_url"], params.get("ready_timeout") or 5, open_url)
    read.update(decide(read, packages, state_dir))
    return read
