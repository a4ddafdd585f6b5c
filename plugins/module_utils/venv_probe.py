# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The venv role's probe: everything the role checks on a node, read in one
call, and what of it differs from what the role wants.

The reads are the ones the role's tasks made one by one: each system
package's dpkg status (``dpkg-query -W -f '${db:Status-Status}' <package>``,
installed when it prints ``installed``), whether the venv's python exists,
the pip installs an interrupted run left running (procs.matching, as
stray_processes finds them), the pins (venv_pins.compare, as
venv_pins_info), the executables in the venv's ``bin`` (present as
ansible.builtin.stat sees them: lstat), and ``nvcc --version`` on the
raylets' PATH.
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.laguna.spark.plugins.module_utils import procs, venv_pins

DPKG_STATUS_FORMAT = "${db:Status-Status}"


def dpkg_query_argv(dpkg_query, package):
    """The command that prints a package's dpkg status ("installed", "config-files", "not-installed", ...)."""
    return [dpkg_query, "-W", "-f", DPKG_STATUS_FORMAT, package]


def packages_missing(statuses):
    """The packages whose status (dpkg-query's output, {package: text}) is not "installed"."""
    return [package for package, status in statuses.items() if status.rstrip("\r\n") != "installed"]


def executables_missing(venv, names, lexists=os.path.lexists):
    """The names with no entry in ``<venv>/bin`` (a dangling link counts as there, as for stat)."""
    return [name for name in names if not lexists(os.path.join(venv, "bin", name))]


def nvcc_result(rc, stdout, stderr, path=None):
    """``nvcc --version``'s outcome in the command module's words: rc, stdout, stderr, and msg
    ("" when it ran, else why not). rc None: no nvcc on ``path``."""
    if rc is None:
        return {"rc": 127, "stdout": "", "stderr": "", "msg": "no nvcc on PATH %s" % path}
    stdout, stderr = stdout.rstrip("\r\n"), stderr.rstrip("\r\n")
    msg = ""
    if rc != 0:
        last = stderr.strip().splitlines()[-1:] or stdout.strip().splitlines()[-1:]
        msg = "non-zero return code %d%s" % (rc, ": " + last[0] if last else "")
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "msg": msg}


def differences(result, venv):
    """One line per thing a run would change or stop on, from the probe's result."""
    lines = []
    if result["system_packages_missing"]:
        lines.append("system packages to install: %s" % ", ".join(result["system_packages_missing"]))
    if not result["exists"]:
        lines.append("venv to create: %s" % venv)
    if result["strays"]:
        lines.append("pip install left running, to stop: %s" % "; ".join(
            "pid %d (%s)" % (stray["pid"], stray["cmdline"][:160]) for stray in result["strays"]))
    if result["missing"]:
        lines.append("pins to install: %s" % ", ".join(
            "%s (installed: %s)" % (item["pin"], item["installed"]) for item in result["missing"]))
    if result["executables_missing"]:
        lines.append("missing in %s/bin: %s" % (venv, ", ".join(result["executables_missing"])))
    nvcc = result["nvcc"]
    if nvcc and nvcc["rc"] != 0:
        lines.append("nvcc does not run on the raylets' PATH (%s)" % nvcc["msg"])
    return lines


def read_packages(module, packages):
    """{package: dpkg status} (status "" when dpkg-query is not there)."""
    dpkg_query = module.get_bin_path("dpkg-query") if packages else None
    statuses = {}
    for package in packages:
        out = ""
        if dpkg_query:
            out = module.run_command(dpkg_query_argv(dpkg_query, package))[1]
        statuses[package] = out.rstrip("\r\n")
    return statuses


def read_nvcc(module, path):
    """``nvcc --version`` run with PATH=path (found on that PATH, as the command module finds it)."""
    nvcc = shutil.which("nvcc", path=path)
    if nvcc is None:
        return nvcc_result(None, "", "", path)
    rc, out, err = module.run_command([nvcc, "--version"], environ_update={"PATH": path})
    return nvcc_result(rc, out, err)


def probe(module, params):
    """Everything the venv role checks, read in this order: packages, strays, pins, executables, nvcc."""
    venv = params["venv"]
    statuses = read_packages(module, params["system_packages"])
    strays = []
    if params["stray_pattern"]:
        found = procs.matching(params["stray_pattern"], exclude=(os.getpid(), os.getppid()))
        strays = procs.strays(found, None)
    result = venv_pins.compare(module, venv, params["pins"], params["index_url"], params["extra_index_urls"],
                               params["pip_args"])
    result.update(
        system_packages=statuses,
        system_packages_missing=packages_missing(statuses),
        strays=strays,
        executables_missing=executables_missing(venv, params["executables"]),
        nvcc=read_nvcc(module, params["nvcc_path"]) if params["nvcc_path"] else {},
    )
    result["differences"] = differences(result, venv)
    return result
