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
import json
import re

from ansible_collections.laguna.spark.plugins.module_utils import systemd_user

_FINGERPRINT = re.compile(r"\[cfg ([0-9a-f]{12})\]")
SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "MainPID",
                   "Description", "ExecMainStatus")


def fingerprint(command, environment, properties, working_directory=None):
    payload = json.dumps(
        {"command": list(command), "environment": environment or {},
         "properties": properties or {}, "cwd": working_directory},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


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
