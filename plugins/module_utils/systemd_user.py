# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""`systemctl --user` for modules: read a user unit's state, start/stop/restart it.

Shared by the systemd_user_unit and systemd_run_service modules. Everything
goes through ``module.run_command`` with the user manager's environment
(XDG_RUNTIME_DIR and the session bus), so a module run as the service user
(``become_user``) talks to that user's manager.
"""

from __future__ import annotations

import os
import shlex

# What a report holds unless more is asked for.
DEFAULT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "MainPID",
                      "ExecMainStatus", "Description", "Environment")
RUNNING_STATES = ("active", "activating", "reloading")
UNIT_SUFFIXES = (".service", ".socket", ".target", ".timer", ".path", ".mount", ".scope", ".slice")


def unit_name(name):
    """``name`` with ``.service`` appended unless it already names a unit type."""
    return name if name.endswith(UNIT_SUFFIXES) else name + ".service"


def user_env(runtime_dir=None, uid=None):
    """Environment that points systemctl at the user's manager."""
    runtime = runtime_dir or "/run/user/%d" % (os.getuid() if uid is None else uid)
    return {"XDG_RUNTIME_DIR": runtime, "DBUS_SESSION_BUS_ADDRESS": "unix:path=%s/bus" % runtime}


def parse_show(text):
    """`systemctl show` output (``Key=value`` lines) to a dict."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value
    return values


def parse_environment(value):
    """The ``Environment=`` property (``A=1 "B=two words"``) to a dict."""
    env = {}
    try:
        words = shlex.split(value or "")
    except ValueError:
        words = (value or "").split()
    for word in words:
        key, sep, val = word.partition("=")
        if sep:
            env[key] = val
    return env


def to_int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def is_running(props):
    return props.get("ActiveState") in RUNNING_STATES


def summarize(unit, props, manager=True):
    """The report of a unit: the documented return values of systemd_user_unit."""
    return {
        "unit": unit,
        "user_manager": manager,
        "exists": props.get("LoadState", "not-found") not in ("not-found", ""),
        "load_state": props.get("LoadState", "not-found" if manager else "unknown"),
        "active_state": props.get("ActiveState", "inactive" if manager else "unknown"),
        "sub_state": props.get("SubState", "dead" if manager else "unknown"),
        "result": props.get("Result", "success" if manager else "unknown"),
        "main_pid": to_int(props.get("MainPID")),
        "exec_main_status": to_int(props.get("ExecMainStatus")),
        "running": is_running(props),
        "description": props.get("Description", ""),
        "environment": parse_environment(props.get("Environment")),
        "properties": dict(props),
    }


def predict(props, action):
    """Properties after ``action`` (started/restarted/stopped), for check and diff mode."""
    after = dict(props)
    if action in ("started", "restarted"):
        after.update(ActiveState="active", SubState="running", Result="success")
    elif action == "stopped":
        after.update(ActiveState="inactive", SubState="dead", MainPID="0")
    return after


def decide(props, state):
    """The action that reaches ``state`` from ``props``: none, started, restarted or stopped."""
    running = is_running(props)
    if state == "started":
        return "none" if running else "started"
    if state == "restarted":
        return "restarted" if running else "started"
    if state == "stopped":
        return "stopped" if running or props.get("ActiveState") == "failed" else "none"
    return "none"


class UserUnits(object):
    """`systemctl --user` through an AnsibleModule."""

    def __init__(self, module, runtime_dir=None):
        self.module = module
        self.env = user_env(runtime_dir)
        self.systemctl = module.get_bin_path("systemctl", required=True)

    def ctl(self, *args):
        return self.module.run_command([self.systemctl, "--user"] + list(args), environ_update=self.env)

    def show(self, unit, properties=DEFAULT_PROPERTIES):
        """(props, error): error is the message when the user manager cannot be asked."""
        rc, out, err = self.ctl("show", unit, "--property=" + ",".join(properties))
        if rc != 0:
            return {}, (err or out).strip() or "rc=%d" % rc
        return parse_show(out), None

    def show_or_fail(self, unit, properties=DEFAULT_PROPERTIES):
        props, error = self.show(unit, properties)
        if error is None:
            return props
        if self.module.check_mode:
            # Before lingering is on there is no user manager to ask; a real
            # run would start the unit.
            self.module.warn("no user manager to ask about %s (%s); assuming it is not running" % (unit, error))
            return {"LoadState": "not-found", "ActiveState": "inactive"}
        self.module.fail_json(
            msg="systemctl --user show %s failed: %s. Is the user manager running "
                "(loginctl enable-linger; XDG_RUNTIME_DIR=%s)?" % (unit, error, self.env["XDG_RUNTIME_DIR"]))
        return None  # not reached

    def act(self, unit, action):
        """Run ``action`` (started/restarted/stopped) on ``unit``; fails the module on error."""
        verb = {"started": "start", "restarted": "restart", "stopped": "stop"}[action]
        rc, out, err = self.ctl(verb, unit)
        if rc != 0:
            self.module.fail_json(msg="systemctl --user %s %s failed: %s" % (verb, unit, (err or out).strip()))
        if action == "stopped":
            # A transient unit that failed stays loaded until its failure is cleared.
            self.ctl("reset-failed", unit)

    def logs(self, unit, lines=40):
        rc, out, dummy = self.module.run_command(
            ["journalctl", "--user", "--unit", unit, "--no-pager", "-n", str(lines)], environ_update=self.env)
        text = (out or "").strip().splitlines()
        if rc != 0 or len(text) <= 1:
            rc, out, dummy = self.ctl("status", "--no-pager", "-n", str(lines), unit)
            text = (out or "").strip().splitlines()
        return text
