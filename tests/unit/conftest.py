"""Helpers to run the collection's modules in-process."""
import json
import os
import sys
import threading

import pytest
from ansible.module_utils.testing import patch_module_args

from helpers import DOUBLES, FIXTURES, ROOT, STANDIN_DFLASH  # noqa: F401  (re-exported for `from conftest import ...`)
from helpers.collection import collections_path
from helpers.constants import MAX_MODEL_LEN

collections_path()  # ansible_collections.laguna.spark: the installed copy
# Older tests import these from here; new ones import them from helpers.
__all__ = ["DOUBLES", "FIXTURES", "ROOT", "STANDIN_DFLASH"]


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    """Fake systemctl/systemd-run/journalctl on PATH (tests/doubles/fake_systemd); read() is their state."""
    bindir = tmp_path / "fake-systemd-bin"
    bindir.mkdir()
    fake = os.path.join(DOUBLES, "fake_systemd", "fake_systemd.py")
    for name in ("systemctl", "systemd-run", "journalctl"):
        (bindir / name).write_text('#!/bin/sh\nFAKE_SYSTEMD_PROG=%s exec "%s" "%s" "$@"\n' % (name, sys.executable, fake))
        (bindir / name).chmod(0o755)
    state = tmp_path / "fake-systemd-state.json"
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(state))
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))

    class Systemd:
        def read(self):
            return json.loads(state.read_text()) if state.exists() else {"units": {}, "calls": []}

        def calls(self, prog):
            return [c for c in self.read()["calls"] if c[0] == prog]

    return Systemd()


class ModuleResult(dict):
    @property
    def failed(self):
        return bool(self.get("failed"))


@pytest.fixture
def run_module(capsys):
    """run_module(module, args, check_mode=False, diff=False) -> result dict."""

    def run(module, args, check_mode=False, diff=False):
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff,
                    _ansible_remote_tmp="/tmp", _ansible_tmpdir=None, _ansible_keep_remote_files=False)
        capsys.readouterr()
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                module.main()
        out = capsys.readouterr().out
        return ModuleResult(json.loads(out))

    return run


@pytest.fixture
def standin_server():
    """start(acceptance=0.75, spec=True) -> base URL of an in-process stand-in vLLM."""
    sys.path.insert(0, os.path.join(DOUBLES, "vllm_standin"))
    from http.server import ThreadingHTTPServer
    from vllm.entrypoints import cli

    servers = []

    def start(acceptance=0.75, spec=True, name="laguna-s-2.1", rate=2000):
        os.environ["LAGUNA_STANDIN_ACCEPTANCE"] = str(acceptance)
        os.environ["LAGUNA_STANDIN_TOKENS_PER_S"] = str(rate)
        engine = cli.Engine(name, {"method": "dflash", "model": "/d", "num_speculative_tokens": 6} if spec else None, MAX_MODEL_LEN)
        server = ThreadingHTTPServer(("127.0.0.1", 0), cli.handler_for(engine))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
    sys.path.remove(os.path.join(DOUBLES, "vllm_standin"))
    for key in ("LAGUNA_STANDIN_ACCEPTANCE", "LAGUNA_STANDIN_TOKENS_PER_S"):
        os.environ.pop(key, None)
