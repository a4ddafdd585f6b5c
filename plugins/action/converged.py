# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Controller side of laguna.spark.converged: with state=check and no
``inputs``, gather what the run was asked to do from the task's variables
(every variable with a laguna.spark role's prefix, the collection's own files, the
play's hosts, how this host is reached), then run the module on the node."""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible.plugins.action import ActionBase

PREFIXES = ("laguna", "preflight", "venv", "ssh_mesh", "fabric", "fabric_env", "network_gate", "linger",
            "staging", "vllm_patch", "firewall", "ray_cluster", "vllm_serve", "monitoring")
# Variables that may hold secrets (with laguna_secret_variables): only their
# sha256 leaves the controller. staging_hf_environment may carry HF_TOKEN.
SECRETS = ("vllm_serve_api_key", "staging_hf_environment")
# The fast path's own state is not an input.
OWN = re.compile(r"^laguna_(fast_|converged)")
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collection_digest(root=COLLECTION_ROOT):
    """sha256 of the installed collection's FILES.json (which lists every
    file's sha256), or of every file under roles/, playbooks/, plugins/ and
    meta/ when there is none (a source checkout)."""
    digest = hashlib.sha256()
    files_json = os.path.join(root, "FILES.json")
    if os.path.isfile(files_json):
        with open(files_json, "rb") as handle:
            digest.update(handle.read())
        return digest.hexdigest()
    for top in ("roles", "playbooks", "plugins", "meta"):
        for base, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(base, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    return digest.hexdigest()


def _plain(value):
    """JSON-ready copy of a templated value (tagged and lazy containers become plain ones)."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def inputs_of(task_vars, templar, prefixes=PREFIXES):
    """What the run was asked to do, as seen from this host's variables.

    A variable that cannot be resolved yet (one derived from facts a later
    role sets) is kept as "unresolved": at the start of every run it is the
    same, and its inputs are fingerprinted with the rest.
    """
    pattern = re.compile(r"^(%s)_" % "|".join(re.escape(p) for p in prefixes))
    try:
        secrets = set(templar.template(task_vars.get("laguna_secret_variables") or []))
    except Exception:
        secrets = set()
    secrets.update(SECRETS)
    variables = {}
    for name in sorted(task_vars):
        if not pattern.match(name) or OWN.match(name):
            continue
        try:
            variables[name] = _plain(templar.template(task_vars[name]))
        except Exception:  # undefined now: derived from a later role's facts
            variables[name] = "unresolved"
        if name in secrets:
            # Never sent to the node or recorded as it is: a change still shows.
            variables[name] = "sha256:" + hashlib.sha256(
                json.dumps(variables[name], sort_keys=True).encode("utf-8")).hexdigest()
    host = task_vars.get("inventory_hostname")
    play_hosts = list(task_vars.get("ansible_play_hosts_all") or [])
    connection = []
    for key in ("ansible_host", "ansible_port", "ansible_user", "ansible_connection"):
        try:
            connection.append(_plain(templar.template(task_vars.get(key))))
        except Exception:
            connection.append("unresolved")
    return {"collection": collection_digest(), "variables": variables, "host": host, "hosts": play_hosts,
            "groups": _plain(dict((g, list(h)) for g, h in (task_vars.get("groups") or {}).items())),
            "connection": connection}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("state", "check") == "check" and not args.get("inputs"):
            templar = self._templar.copy_with_new_env(available_variables=task_vars)
            args["inputs"] = inputs_of(task_vars, templar)
        result.update(self._execute_module(module_name="laguna.spark.converged", module_args=args,
                                           task_vars=task_vars))
        return result
