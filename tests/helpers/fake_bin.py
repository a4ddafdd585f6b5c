"""Fake commands on PATH: executables written into a directory that goes first on PATH for the test."""

import os
import sys


def on_path(monkeypatch, bindir, scripts):
    """Write ``scripts`` ({name: text}) as executables in ``bindir`` (made if missing) and put it first on PATH."""
    bindir.mkdir(parents=True, exist_ok=True)
    for name, text in scripts.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    return bindir


def python_script(script, env=""):
    """A /bin/sh wrapper running the Python ``script`` with this interpreter, its arguments passed on;
    ``env`` (``"NAME=value "``) goes before the exec."""
    return '#!/bin/sh\n%sexec "%s" "%s" "$@"\n' % (env, sys.executable, script)


def systemd_on_path(monkeypatch, bindir, script, progs=("systemctl", "systemd-run", "journalctl")):
    """A fake systemd in Python (``script``, told which program it runs as by FAKE_SYSTEMD_PROG) on PATH as ``progs``."""
    return on_path(monkeypatch, bindir, {prog: python_script(script, "FAKE_SYSTEMD_PROG=%s " % prog) for prog in progs})
