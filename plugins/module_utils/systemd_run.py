# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Transient `systemd-run --user` services that know their own configuration.

A transient unit has no unit file to compare against, so the unit's
Description carries a fingerprint of the command, environment and properties
it was started with. A rerun with the same configuration finds the same
fingerprint on an active unit and leaves it alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re

from ansible_collections.laguna.spark.plugins.module_utils import systemd_user

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


def unit_file(description_text, command, environment=None, properties=None, working_directory=None,
              after=(), restart_sec=10, start_limit_interval=600, start_limit_burst=20,
              start_env=None, secret_env_file=None):
    """The text of a persistent user unit: enabled in default.target, so the
    user manager (lingering) starts it at boot; Restart=on-failure. With
    ``start_env`` (script path, env file path) the script runs as
    ExecStartPre and writes the env file that the main process reads, so
    values such as the RoCE GID index are resolved anew at each start."""
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
    lines += ["Restart=on-failure", "RestartSec=%d" % restart_sec]
    for key in sorted(properties or {}):
        lines.append("%s=%s" % (key, _specifiers(str(properties[key]))))
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)
