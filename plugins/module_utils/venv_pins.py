# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Compare a venv's installed distributions with pinned requirements.

Pins are ``name==version`` (exact, local version label included, e.g.
``torch==2.11.0+cu130``), ``name[extra]==version`` or a bare ``name`` (any
version). Names compare in PEP 503 normal form. A pin with extras is met
only when the requirements its extras add are met too (``ray[default]``:
Ray's metrics agent needs them), which EXTRAS_CHECK asks the venv's python.
"""

from __future__ import annotations

import json
import os
import re

PIN_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?\s*$")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(pin):
    match = PIN_RE.match(pin)
    if not match:
        raise ValueError("not a pin of the form name==version or name: %r" % pin)
    return normalize(match.group(1)), match.group(3)


def pin_extras(pin):
    """The extras a pin asks for (``ray[default]==2.60.0``: ``["default"]``), sorted and normalized."""
    match = PIN_RE.match(pin)
    if not match:
        raise ValueError("not a pin of the form name==version or name: %r" % pin)
    listed = (match.group(2) or "[]")[1:-1]
    return sorted({normalize(extra.strip()) for extra in listed.split(",") if extra.strip()})


# Run by the venv's own python (``python -c EXTRAS_CHECK '<json [[name, [extra, ...]], ...]>'``):
# prints {name: [requirement, ...]}, the requirements each distribution's extras add that the venv
# does not meet (missing, or a version outside the specifier); a distribution that is not installed
# gets ["(not installed)"]. Markers are evaluated with pip's own copy of packaging, which every venv
# made with ensurepip has.
EXTRAS_CHECK = r"""
import json, sys
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
out = {}
for name, extras in json.loads(sys.argv[1]):
    try:
        requires = md.requires(name) or []
    except md.PackageNotFoundError:
        out[name] = ["(not installed)"]
        continue
    missing = []
    for text in requires:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            continue
        if not any(req.marker.evaluate({"extra": extra}) for extra in extras):
            continue
        wanted = req.name + str(req.specifier)
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            missing.append(wanted)
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            missing.append("%s (installed %s)" % (wanted, version))
    out[name] = missing
print(json.dumps(out))
"""


def extras_query(pins):
    """The argument of EXTRAS_CHECK for the pins that name extras ([] when none does)."""
    return [[parse_pin(pin)[0], pin_extras(pin)] for pin in pins if pin_extras(pin)]


def installed_from_pip_list(text):
    """{normal name: version} from ``pip list --format json``."""
    return {normalize(item["name"]): item["version"] for item in json.loads(text or "[]")}


def unsatisfied(pins, installed, extras_missing=None):
    """The pins the installed set does not meet, as dicts (pin, name, wanted, installed, and for a
    pin with extras, extras_missing: what EXTRAS_CHECK found its extras lack)."""
    extras_missing = extras_missing or {}
    out = []
    for pin in pins:
        name, wanted = parse_pin(pin)
        have = installed.get(name)
        lacking = extras_missing.get(name, []) if pin_extras(pin) else []
        if have is None or (wanted is not None and have != wanted) or lacking:
            item = {"pin": pin, "name": name, "wanted": wanted, "installed": have}
            if pin_extras(pin):
                item["extras_missing"] = lacking
            out.append(item)
    return out


def pip_install_argv(python, pins, index_url=None, extra_index_urls=(), extra_args=()):
    """The pip command that installs every pin (all together, so the resolver sees the whole set)."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if index_url:
        argv += ["--index-url", index_url]
    for url in extra_index_urls:
        argv += ["--extra-index-url", url]
    return argv + list(extra_args) + list(pins)


def compare(module, venv, pins, index_url=None, extra_index_urls=(), pip_args=()):
    """What venv_pins_info returns (exists, installed, missing, install_argv): ``pip list`` and, for pins
    with extras, EXTRAS_CHECK, run by the venv's python through ``module.run_command``. A bad pin, or
    pip failing, fails the module (with install_argv)."""
    python = os.path.join(venv, "bin", "python")
    try:
        for pin in pins:
            parse_pin(pin)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    argv = pip_install_argv(python, pins, index_url, extra_index_urls, pip_args)
    installed = {}
    extras_missing = {}
    exists = os.path.exists(python)
    if exists:
        rc, out, err = module.run_command([python, "-m", "pip", "list", "--format", "json",
                                           "--disable-pip-version-check"])
        if rc != 0:
            module.fail_json(msg="pip list failed in %s: %s" % (venv, err.strip()), install_argv=argv)
        installed = installed_from_pip_list(out)
        query = extras_query(pins)
        if query:
            rc, out, err = module.run_command([python, "-c", EXTRAS_CHECK, json.dumps(query)])
            if rc != 0:
                module.fail_json(msg="reading the extras' requirements failed in %s: %s" % (venv, err.strip()),
                                 install_argv=argv)
            extras_missing = json.loads(out)
    return dict(exists=exists, installed=installed, missing=unsatisfied(pins, installed, extras_missing),
                install_argv=argv)
