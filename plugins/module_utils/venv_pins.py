# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Compare a venv's installed distributions with pinned requirements.

Pins are ``name==version`` (exact, local version label included, e.g.
``torch==2.11.0+cu130``), ``name[extra]==version`` or a bare ``name`` (any
version). Names compare in PEP 503 normal form.
"""

from __future__ import annotations

import json
import re

PIN_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?\s*$")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(pin):
    match = PIN_RE.match(pin)
    if not match:
        raise ValueError("not a pin of the form name==version or name: %r" % pin)
    return normalize(match.group(1)), match.group(3)


def installed_from_pip_list(text):
    """{normal name: version} from ``pip list --format json``."""
    return {normalize(item["name"]): item["version"] for item in json.loads(text or "[]")}


def unsatisfied(pins, installed):
    """The pins the installed set does not meet, as dicts (pin, name, wanted, installed)."""
    out = []
    for pin in pins:
        name, wanted = parse_pin(pin)
        have = installed.get(name)
        if have is None or (wanted is not None and have != wanted):
            out.append({"pin": pin, "name": name, "wanted": wanted, "installed": have})
    return out


def pip_install_argv(python, pins, index_url=None, extra_index_urls=(), extra_args=()):
    """The pip command that installs every pin (all together, so the resolver sees the whole set)."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if index_url:
        argv += ["--index-url", index_url]
    for url in extra_index_urls:
        argv += ["--extra-index-url", url]
    return argv + list(extra_args) + list(pins)
