# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Transient `systemd-run --user` services that know their own configuration.

A transient unit has no unit file to compare against, so the unit's
Description carries a fingerprint of the command, environment and properties
it was started with. A rerun with the same configuration finds the same
fingerprint on an active unit and leaves it alone. A persistent unit (a unit
file in the user's unit directory) carries the same fingerprint.

``Service`` is the logic of the systemd_run_service module: it reads the
unit's state, decides what to do (none, start, restart, stop, enable) and
does it; the module keeps the argument handling.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import re
import time

from ansible_collections.laguna.spark.plugins.module_utils import files, procs, systemd_user

_FINGERPRINT = re.compile(r"\[cfg ([0-9a-f]{12})\]")
SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "MainPID",
                   "Description", "ExecMainStatus", "FragmentPath", "UnitFileState")


def fingerprint(command, environment, properties, working_directory=None, persistent=None, secret=None):
    """A short digest of what a unit runs. ``persistent`` (the unit file's
    other settings, when there is one) changes it; None keeps the digests of
    transient units as they were. ``secret`` is the keyed digest of the
    secret environment (secret_digest), never the secrets themselves."""
    fields = {"command": list(command), "environment": environment or {},
              "properties": properties or {}, "cwd": working_directory}
    if persistent is not None:
        fields["persistent"] = persistent
    if secret is not None:
        fields["secret"] = secret
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


# --- Secret environment: a 0600 file the unit reads, never its command line -

_SALT = re.compile(r"^# laguna-spark salt ([0-9a-f]{32})$", re.M)
# Printable ASCII without space, quotes, backslash and $: written as is, read
# back by systemd's EnvironmentFile= parser unchanged.
_SECRET_VALUE = re.compile(r"^[!#%&(-\[\]-~]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_secret_environment(environment):
    """Refuse a name or value that an EnvironmentFile= line cannot carry as it is."""
    for key, value in (environment or {}).items():
        if not _ENV_NAME.match(str(key)):
            raise ValueError("secret environment name %r is not a variable name" % key)
        if not _SECRET_VALUE.match(str(value)):
            raise ValueError("the value of secret environment variable %s is empty or holds a space, a quote, "
                             "a backslash, a $ or a non-ASCII character" % key)


def salt_of(text):
    """The random salt recorded in a secret environment file's first line, or None."""
    match = _SALT.search(text or "")
    return match.group(1) if match else None


def new_salt():
    return os.urandom(16).hex()


def secret_file(environment, salt):
    """The text of a secret environment file: the salt as a comment (which
    systemd skips), then KEY=value lines."""
    lines = ["# laguna-spark salt %s" % salt]
    lines += ["%s=%s" % (key, environment[key]) for key in sorted(environment)]
    return "\n".join(lines) + "\n"


def secret_digest(environment, salt):
    """A keyed digest of the secret values: it changes with them, and tells
    nothing about them without the salt, which only the file's owner reads."""
    payload = json.dumps(environment, sort_keys=True, separators=(",", ":"))
    return hmac.new(salt.encode("ascii"), payload.encode("utf-8"), hashlib.sha256).hexdigest()[:16]


def description(text, digest):
    return "%s [cfg %s]" % (text, digest)


def fingerprint_of(description_text):
    match = _FINGERPRINT.search(description_text or "")
    return match.group(1) if match else None


def run_argv(systemd_run, name, command, environment=None, properties=None,
             description_text=None, working_directory=None):
    """argv for `systemd-run --user` starting ``command`` as service ``name``."""
    argv = [systemd_run, "--user", "--unit=%s" % name]
    if description_text:
        argv.append("--description=%s" % description_text)
    if working_directory:
        argv.append("--working-directory=%s" % working_directory)
    for key in sorted(properties or {}):
        argv.append("--property=%s=%s" % (key, properties[key]))
    for key in sorted(environment or {}):
        argv.append("--setenv=%s=%s" % (key, environment[key]))
    argv.append("--")
    argv.extend(str(part) for part in command)
    return argv


# Unit state comes from the shared `systemctl --user` code.
parse_show = systemd_user.parse_show
is_running = systemd_user.is_running


# --- Persistent units: a unit file in the user's unit directory ------------

_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _specifiers(text):
    return text.replace("%", "%%")


def unit_word(arg):
    """One ExecStart argument as systemd reads it back: specifiers (%) and
    variables ($) are escaped, a word with anything but plain characters is
    double-quoted with C escapes (systemd.service, "Command lines")."""
    text = str(arg)
    if "\n" in text or "\r" in text:
        raise ValueError("a unit's command line cannot hold a newline: %r" % text)
    text = _specifiers(text).replace("$", "$$")
    if text and _PLAIN.match(text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def unit_assignment(key, value):
    """An Environment= assignment, quoted whole (specifiers escaped; $ is not
    expanded in Environment=)."""
    text = "%s=%s" % (key, value)
    if "\n" in text or "\r" in text:
        raise ValueError("an environment value cannot hold a newline: %r" % text)
    return '"%s"' % _specifiers(text).replace("\\", "\\\\").replace('"', '\\"')


RESTART_POLICIES = ("always", "on-failure")


def unit_file(description_text, command, environment=None, properties=None, working_directory=None,
              after=(), restart_sec=10, start_limit_interval=600, start_limit_burst=20,
              start_env=None, secret_env_file=None, restart="always"):
    """The text of a persistent user unit: enabled in default.target, so the
    user manager (lingering) starts it at boot.

    ``restart`` is its Restart=: ``always`` starts it again after any exit
    that was not a requested stop (`systemctl stop`, a stop job of the
    unit), including a clean one: real vLLM exits with status 0 when one of
    its Ray workers dies. The start limit (StartLimitBurst= starts within
    StartLimitIntervalSec=) bounds a crash loop: the unit then ends failed.

    With ``start_env`` (script path, env file path) the script runs as
    ExecStartPre and writes the env file that the main process reads, so
    values such as the RoCE GID index are resolved anew at each start."""
    if restart not in RESTART_POLICIES:
        raise ValueError("Restart=%s is not one of %s" % (restart, ", ".join(RESTART_POLICIES)))
    lines = ["[Unit]", "Description=%s" % _specifiers(description_text)]
    if after:
        lines += ["Wants=%s" % " ".join(after), "After=%s" % " ".join(after)]
    lines += ["StartLimitIntervalSec=%d" % start_limit_interval, "StartLimitBurst=%d" % start_limit_burst,
              "", "[Service]", "Type=simple"]
    if working_directory:
        lines.append("WorkingDirectory=%s" % unit_word(working_directory))
    for key in sorted(environment or {}):
        lines.append("Environment=%s" % unit_assignment(key, environment[key]))
    if start_env:
        script, env_file = start_env
        lines += ["ExecStartPre=%s %s" % (unit_word(script), unit_word(env_file)),
                  "EnvironmentFile=-%s" % _specifiers(env_file)]
    if secret_env_file:
        lines.append("EnvironmentFile=%s" % _specifiers(secret_env_file))
    lines.append("ExecStart=%s" % " ".join(unit_word(part) for part in command))
    lines += ["Restart=%s" % restart, "RestartSec=%d" % restart_sec]
    for key in sorted(properties or {}):
        lines.append("%s=%s" % (key, _specifiers(str(properties[key]))))
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


# --- The service a systemd_run_service task wants ----------------------------

class Service(object):
    """One user service, transient or from a unit file."""

    def __init__(self, module):
        self.module = module
        self.params = params = module.params
        self.unit = params["name"] if params["name"].endswith(".service") else params["name"] + ".service"
        self.units = systemd_user.UserUnits(module, params["runtime_dir"])
        home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
        self.unit_path = os.path.join(params["unit_dir"] or os.path.join(home, ".config", "systemd", "user"),
                                      self.unit)
        self.script_path = os.path.join(home, ".config", "laguna-spark", self.unit[:-len(".service")] + ".start-env")
        self.secret_path = os.path.join(home, ".config", "laguna-spark", self.unit[:-len(".service")] + ".secret-env")
        self.secret_text = None  # the secret file to write, when it differs
        self.env_file = os.path.join(self.units.env["XDG_RUNTIME_DIR"], "laguna-spark",
                                     self.unit[:-len(".service")] + ".env")
        self.current = self.units.show_or_fail(self.unit, SHOW_PROPERTIES)
        self.running = is_running(self.current)
        # Active to systemd, but a signal stopped its processes (SIGSTOP): restarted.
        self.stopped = procs.stopped(self.unit) if self.running else []
        self.previous = fingerprint_of(self.current.get("Description"))
        self.has_file = os.path.exists(self.unit_path)
        self.from_file = self.current.get("FragmentPath") == self.unit_path
        self.result = dict(changed=False, unit=self.unit, previous_fingerprint=self.previous, action="none",
                           active_state=self.current.get("ActiveState", "inactive"),
                           main_pid=int(self.current.get("MainPID") or 0),
                           persistent=self.from_file and self.current.get("UnitFileState") == "enabled",
                           stopped_pids=self.stopped)

    def ctl(self, *args):
        rc, out, err = self.units.ctl(*args)
        if rc != 0:
            self.module.fail_json(msg="systemctl --user %s failed: %s. Last log lines: %s"
                                  % (" ".join(args), (err or out).strip(), " | ".join(self.units.logs(self.unit)[-15:])),
                                  **self.result)

    def remove_file(self):
        """Disable and remove the unit file (and script) of an earlier persistent run."""
        self.ctl("disable", self.unit)
        for path in (self.unit_path, self.script_path):
            if os.path.exists(path):
                os.remove(path)
        self.ctl("daemon-reload")

    def stop(self):
        # Anything but inactive: running, failed, or crashed and waiting for
        # its Restart= (activating/auto-restart), which is not "running".
        stop = self.current.get("ActiveState", "inactive") not in ("inactive", "")
        remove = self.has_file and not self.params["persistent"]
        if stop:
            self.result.update(changed=True, action="stopped", active_state="inactive", main_pid=0)
        if remove:
            self.result.update(changed=True, persistent=False)
            if self.module._diff:
                self.result["diff"] = {"before": files.read_text(self.unit_path) or "", "after": "",
                                       "before_header": self.unit_path, "after_header": self.unit_path}
        secret = os.path.exists(self.secret_path)
        if secret:
            self.result["changed"] = True
        if self.module.check_mode:
            return
        if stop:
            self.units.act(self.unit, "stopped")
        if remove:
            self.remove_file()
        if secret:
            os.remove(self.secret_path)

    def secrets(self):
        """The keyed digest of the secret environment (None without one);
        the file to write goes to self.secret_text when it differs."""
        wanted = {str(k): str(v) for k, v in self.params["secret_environment"].items()}
        wanted.update(self.secret_files())
        if not wanted:
            return None
        check_secret_environment(wanted)
        old = files.read_text(self.secret_path)
        # A new salt in check mode would be random: any stand-in tells that the file changes.
        salt = salt_of(old) or ("0" * 32 if self.module.check_mode else new_salt())
        text = secret_file(wanted, salt)
        if text != old:
            self.secret_text = text
        return secret_digest(wanted, salt)

    def secret_files(self):
        """{name: value} of secret_environment_files: each value is the
        content of a file on this node (a token another role keeps there), so
        it never passes through the controller. A missing or empty file fails,
        except in check mode, where a stand-in predicts the start."""
        found = {}
        for key, path in sorted((self.params.get("secret_environment_files") or {}).items()):
            value = (files.read_text(os.path.expanduser(str(path))) or "").strip()
            if not value and self.module.check_mode:
                value = "missing-in-check-mode"
            elif not value:
                self.module.fail_json(msg="%s of %s comes from %s, which is missing or empty on this node: run the "
                                          "role that writes it first (for the Ray token: --tags ray_cluster)"
                                      % (key, self.unit, path), **self.result)
            found[str(key)] = value
        return found

    def write_secrets(self):
        """Write the secret file (0600, its directory 0700), or remove one no longer wanted."""
        if self.secret_text is not None:
            files.write_atomic(self.module, self.secret_path, self.secret_text, mode=0o600, dir_mode=0o700)
        elif (not self.params["secret_environment"] and not self.params.get("secret_environment_files")
              and os.path.exists(self.secret_path)):
            os.remove(self.secret_path)

    def settle(self, argv=None):
        deadline = time.time() + self.params["settle"]
        while True:
            now = self.units.show_or_fail(self.unit, SHOW_PROPERTIES)
            if not is_running(now):
                self.module.fail_json(
                    msg="%s stopped right after starting (%s/%s, exit status %s). Last log lines: %s"
                    % (self.unit, now.get("ActiveState"), now.get("SubState") if now.get("SubState") == "auto-restart"
                       else now.get("Result"), now.get("ExecMainStatus"),
                       " | ".join(self.units.logs(self.unit)[-15:])),
                    argv=argv, active_state=now.get("ActiveState"))
            if time.time() >= deadline:
                break
            time.sleep(0.5)
        self.result.update(active_state=now.get("ActiveState"), main_pid=int(now.get("MainPID") or 0))

    def transient(self, environment, properties):
        params = self.params
        secret = self.secrets()
        digest = fingerprint(params["command"], environment, properties, params["working_directory"],
                             secret=secret)
        self.result["fingerprint"] = digest
        stale_secret = secret is None and os.path.exists(self.secret_path)
        if (params["state"] == "started" and self.running and self.previous == digest and not self.from_file
                and not self.stopped):
            # Same secrets, but their file was edited or is left over: put it right.
            self.result["changed"] = stale_secret or self.secret_text is not None
            if self.result["changed"] and not self.module.check_mode:
                self.write_secrets()
            return
        run_properties = dict(properties, EnvironmentFile=self.secret_path) if secret else properties
        argv = run_argv(
            self.module.get_bin_path("systemd-run", required=True), self.unit[:-len(".service")],
            params["command"], environment, run_properties,
            description(params["description"], digest), params["working_directory"])
        self.result.update(changed=True, argv=argv, action="restarted" if self.running else "started",
                           active_state="active", persistent=False)
        if self.module.check_mode:
            return
        if self.running or self.current.get("LoadState") == "loaded":
            self.units.act(self.unit, "stopped")
        if self.has_file:
            self.remove_file()
        self.write_secrets()
        # Arguments reach systemd as given: no ~ or $VAR expansion by run_command.
        rc, out, err = self.module.run_command(argv, environ_update=self.units.env, expand_user_and_vars=False)
        if rc != 0:
            self.module.fail_json(msg="systemd-run for %s failed (rc=%d): %s" % (self.unit, rc, err.strip()),
                                  argv=argv)
        self.settle(argv)

    def persistent(self, environment, properties):
        params = self.params
        script = params["start_env_script"]
        resolved = {}
        if script:
            resolved = {key: environment.pop(key) for key in params["start_env_keys"] if key in environment}
        running_env = procs.environment(self.current.get("MainPID")) if resolved and self.running else {}
        drift = {key: {"have": running_env.get(key), "want": value} for key, value in resolved.items()
                 if running_env and running_env.get(key) != value}
        self.result["start_env_drift"] = drift
        settings = {"after": params["after"], "restart_sec": params["restart_sec"],
                    "start_limit_burst": params["start_limit_burst"], "start_env_script": script,
                    "start_limit_interval": params["start_limit_interval"], "restart": params["restart"]}
        secret = self.secrets()
        digest = fingerprint(params["command"], environment, properties, params["working_directory"], settings,
                             secret=secret)
        text = unit_file(
            description(params["description"], digest), params["command"], environment, properties,
            params["working_directory"], after=params["after"], restart_sec=params["restart_sec"],
            start_limit_interval=params["start_limit_interval"], start_limit_burst=params["start_limit_burst"],
            restart=params["restart"],
            start_env=(self.script_path, self.env_file) if script else None,
            secret_env_file=self.secret_path if secret else None)
        old_text = files.read_text(self.unit_path)
        stale_secret = secret is None and os.path.exists(self.secret_path)
        files_ok = (old_text == text and (script is None or files.read_text(self.script_path) == script)
                    and self.secret_text is None and not stale_secret)
        loaded = self.from_file and self.previous == digest
        enabled = self.current.get("UnitFileState") == "enabled"
        self.result.update(fingerprint=digest, unit_file=self.unit_path, persistent=True)
        if self.module._diff:
            self.result["diff"] = {"before": old_text or "", "after": text,
                                   "before_header": self.unit_path, "after_header": self.unit_path}
        fresh = files_ok and loaded and not drift and not self.stopped
        if params["state"] == "started" and self.running and fresh and enabled:
            return
        if self.running and fresh and enabled:
            action = "restarted"  # state=restarted
        elif self.running and fresh:
            action = "enabled"
        else:
            action = "restarted" if self.running else "started"
        self.result.update(changed=True, action=action, active_state="active")
        if self.module.check_mode:
            return
        if not self.from_file and (self.running or self.current.get("LoadState") == "loaded"):
            # A transient unit of the same name: stop it (it is collected) first.
            self.units.act(self.unit, "stopped")
        if not files_ok:
            if script is not None:
                files.write_atomic(self.module, self.script_path, script, mode=0o755, dir_mode=0o755)
            self.write_secrets()
            files.write_atomic(self.module, self.unit_path, text, mode=0o644, dir_mode=0o755)
        if not loaded:
            self.ctl("daemon-reload")
        if not enabled:
            self.ctl("enable", self.unit)
        if action != "enabled":
            # A start the run asks for is not one of systemd's own restarts:
            # reset-failed clears a failed state and the start-limit counter,
            # which then bounds only the automatic restarts after it.
            self.ctl("reset-failed", self.unit)
            self.ctl("restart" if self.running else "start", self.unit)
        self.settle()
