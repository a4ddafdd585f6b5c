# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The network_gate role's decisions (its probe, network_gate_probe).

* ``record_inputs``: what a measurement depends on, from the plan
  (``perftest.plan``): each planned test's devices, addresses, command lines
  and both sides' links as sysfs shows them (state, rate, MTU, PCIe), the
  thresholds. The role writes it, with the figures, once a measurement
  passed; the next run measures again only when it differs.
* ``record_differences``: one line per difference between the record's text
  (None: no record) and the inputs wanted now.
* ``find_tool``: the path of the test's executable, as ``command -v`` finds it.
"""

from __future__ import annotations

import json
import os

RECORD_VERSION = 1
# The keys of a planned ib_write_bw test that decide its result (the scheduled
# commands add only timeout(1)'s bounds, derived from the duration in the argv).
PAIR_KEYS = ("worker", "twin", "head_device", "worker_device", "server_address", "client_argv", "server_argv",
             "head_link", "worker_link")


def record_inputs(tool, planned, min_gbps_per_device):
    """The inputs of a measurement: the tool, its tests, the thresholds."""
    if tool == "all_gather_perf":
        tests = [{"argv": list(planned["argv"])}]
    else:
        tests = [dict((key, pair.get(key)) for key in PAIR_KEYS) for pair in planned["pairs"]]
    return {"version": RECORD_VERSION, "tool": tool, "tests": tests,
            "min_gbps_per_device": float(min_gbps_per_device),
            "threshold_total": float(planned["threshold_total"])}


def _label(test):
    if "argv" in test:
        return "all_gather_perf"
    return "test %s (head %s -> %s %s)" % (test.get("twin"), test.get("head_device"), test.get("worker"),
                                           test.get("worker_device"))


def _flat(value, prefix=""):
    """{dotted key: leaf} of nested dicts; lists are leaves (printed whole)."""
    if isinstance(value, dict):
        found = {}
        for key in sorted(value):
            found.update(_flat(value[key], "%s%s." % (prefix, key)))
        return found
    return {prefix[:-1]: value}


def _show(value):
    if isinstance(value, list):
        return " ".join(str(item) for item in value)
    return "none" if value is None else str(value)


def _changes(old, new):
    """["key old -> new"] of two dicts, flattened."""
    before, after = _flat(old), _flat(new)
    return ["%s %s -> %s" % (key, _show(before.get(key)), _show(after.get(key)))
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def record_differences(path, text, wanted):
    """One line per difference between the record (``text``, None when there is none) and
    ``wanted`` (``record_inputs``); [] when the last measurement stands."""
    if text is None:
        return ["%s: no measurement recorded; measure" % path]
    try:
        record = json.loads(text)
        inputs = record["inputs"]
        if not isinstance(inputs, dict):
            raise ValueError("inputs is not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        return ["%s: unreadable (%s); measure again" % (path, exc)]
    if inputs.get("version") != wanted["version"]:
        return ["%s: record version %s, this collection writes %s; measure again"
                % (path, inputs.get("version"), wanted["version"])]
    found = []
    for key in ("tool", "min_gbps_per_device", "threshold_total"):
        if inputs.get(key) != wanted[key]:
            found.append("%s: %s %s -> %s; measure again" % (path, key, _show(inputs.get(key)), _show(wanted[key])))
    old_tests = inputs.get("tests") if isinstance(inputs.get("tests"), list) else []
    new_tests = wanted["tests"]
    if inputs.get("tool") == wanted["tool"]:
        for old, new in zip(old_tests, new_tests):
            if old != new:
                changes = _changes(old if isinstance(old, dict) else {}, new)
                found.append("%s: %s: %s; measure again" % (path, _label(new), ", ".join(changes)))
    if len(old_tests) != len(new_tests):
        found.append("%s: %d test(s) recorded, %d planned (%s); measure again" % (
            path, len(old_tests), len(new_tests), ", ".join(_label(test) for test in new_tests) or "none"))
    return found


def find_tool(name, path_env):
    """``name``'s path as ``command -v`` finds it: itself when it holds a slash and is an executable
    file, else the first executable file of that name in ``path_env``'s directories; None if none."""
    def runnable(path):
        return os.path.isfile(path) and os.access(path, os.X_OK)

    if "/" in name:
        return name if runnable(name) else None
    for directory in (path_env or "").split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if runnable(candidate):
            return candidate
    return None
