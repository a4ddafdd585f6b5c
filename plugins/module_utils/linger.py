# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""systemd lingering of the service user: read it, enable it when it is off,
wait for the user manager's bus (the user_linger module, the linger role).

Lingering is on when logind's linger file exists (/var/lib/systemd/linger/<user>,
what C(loginctl enable-linger) creates) and C(loginctl show-user) says
C(Linger=yes); anything else is off and C(loginctl enable-linger) runs. Then
the user manager (user@<uid>.service) must create its bus,
/run/user/<uid>/bus, within the timeout. The report (fact linger_report) is
status_reports.linger of what loginctl says last.
"""

from __future__ import annotations

import os
import time

from ansible_collections.laguna.spark.plugins.module_utils import status_reports

LINGER_DIR = "/var/lib/systemd/linger"
RUNTIME_DIR = "/run/user"
POLL = 0.5


class LingerError(Exception):
    """A failure whose text names the cause and the fix."""


def linger_file(user, linger_dir=LINGER_DIR):
    return os.path.join(linger_dir, user)


def bus_path(uid, runtime_dir=RUNTIME_DIR):
    return os.path.join(runtime_dir, str(uid), "bus")


def read(run, user, linger_dir=LINGER_DIR, loginctl="loginctl"):
    """{file, rc, stdout, stderr, report}: the linger file's existence and what
    `loginctl show-user <user> --property=Linger --value` says (``run`` is
    module.run_command)."""
    rc, out, err = run([loginctl, "show-user", user, "--property=Linger", "--value"])
    return {"file": os.path.exists(linger_file(user, linger_dir)), "rc": rc, "stdout": out, "stderr": err,
            "report": status_reports.linger(rc, out, err, user)}


def is_on(state):
    """Lingering is on: the file exists and loginctl says yes."""
    return state["file"] and state["report"]["ok"]


def why_off(state, user, linger_dir=LINGER_DIR):
    """The reasons lingering is off, one line each (empty when it is on)."""
    reasons = []
    if not state["file"]:
        reasons.append("%s does not exist" % linger_file(user, linger_dir))
    if not state["report"]["ok"]:
        reasons.append("loginctl says Linger=%s for %s" % (state["report"]["linger"], user))
    return reasons


def wait_for_path(path, timeout, exists=os.path.exists, clock=time.monotonic, sleep=time.sleep):
    """Seconds until ``path`` exists (asked every POLL s), or None after ``timeout`` s."""
    start = clock()
    while True:
        if exists(path):
            return round(clock() - start, 1)
        if clock() - start >= timeout:
            return None
        sleep(POLL)


def enable_failed(user, rc, out, err, linger_dir=LINGER_DIR):
    return ("loginctl enable-linger %s failed (rc %d): %s. Lingering stays off, so the user's systemd manager "
            "(and the raylet under it) stops when the last SSH session closes. Is systemd-logind running "
            "(systemctl status systemd-logind) and %s writable?"
            % (user, rc, (err or out or "").strip() or "no output", linger_dir))


def bus_missing(user, uid, bus, timeout, enabled):
    when = "after lingering was enabled" if enabled else "with lingering on"
    return ("The user manager of %s (user@%s.service) did not create its bus %s within %d s %s, so no "
            "systemctl --user unit (raylet, vLLM) can run. See why it does not start: "
            "`systemctl status user@%s.service` and `journalctl -b -u user@%s.service`; fix that and rerun. "
            "If it is only slow to start, raise the timeout (linger_wait_timeout in the linger role)."
            % (user, uid, bus, timeout, when, uid, uid))


def ensure(run, user, uid, timeout, check_mode=False, linger_dir=LINGER_DIR, runtime_dir=RUNTIME_DIR,
           loginctl="loginctl", wait=wait_for_path):
    """Read lingering, enable it when off (not in check mode), wait for the bus.

    Returns {changed, enabled, reasons, linger_file, bus, bus_waited, report, before};
    raises LingerError when loginctl enable-linger fails or the bus does not
    appear within ``timeout`` s. In check mode nothing is run but the read (and
    the wait, when lingering is already on).
    """
    before = read(run, user, linger_dir, loginctl)
    reasons = why_off(before, user, linger_dir)
    enabled = bool(reasons) and not check_mode
    if enabled:
        rc, out, err = run([loginctl, "enable-linger", user])
        if rc != 0:
            raise LingerError(enable_failed(user, rc, out, err, linger_dir))
    bus = bus_path(uid, runtime_dir)
    waited = None
    # In check mode, after an enable that did not run, there is nothing to wait for.
    if not check_mode or not reasons:
        waited = wait(bus, timeout)
        if waited is None:
            raise LingerError(bus_missing(user, uid, bus, timeout, enabled))
    # What loginctl says after the enable (and the wait) is the report.
    state = read(run, user, linger_dir, loginctl) if enabled else before
    return {"changed": bool(reasons), "enabled": enabled, "reasons": reasons, "linger_file": state["file"],
            "bus": bus, "bus_waited": waited, "report": state["report"], "before": before["report"]["linger"]}


def status(run, user, linger_dir=LINGER_DIR, loginctl="loginctl"):
    """Read-only: {changed: False, linger_file, reasons, report}."""
    state = read(run, user, linger_dir, loginctl)
    return {"changed": False, "linger_file": state["file"], "reasons": why_off(state, user, linger_dir),
            "report": state["report"]}
