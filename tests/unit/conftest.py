"""Helpers to run the collection's modules in-process."""
import importlib.util
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from helpers import DOUBLES, FIXTURES, ROOT, STANDIN_DFLASH  # noqa: F401  (re-exported for `from conftest import ...`)
from helpers import standin
from helpers.collection import collections_path
from helpers.fake_bin import systemd_on_path
from helpers.servers import Servers

collections_path()  # ansible_collections.laguna.spark: the installed copy
# Older tests import these from here; new ones import them from helpers.
__all__ = ["DOUBLES", "FIXTURES", "ROOT", "STANDIN_DFLASH"]


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    """Fake systemctl/systemd-run/journalctl on PATH (tests/doubles/fake_systemd); read() is their state."""
    systemd_on_path(monkeypatch, tmp_path / "fake-systemd-bin", os.path.join(DOUBLES, "fake_systemd", "fake_systemd.py"))
    state = tmp_path / "fake-systemd-state.json"
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(state))

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
def http_server():
    """start(handler) -> base URL of the handler class served on 127.0.0.1 (helpers.servers), until the test ends."""
    with Servers() as servers:
        yield servers.start


@pytest.fixture
def standin_server(http_server, monkeypatch):
    """start(acceptance=0.75, spec=True) -> base URL of an in-process stand-in vLLM."""
    cli, = standin.modules("vllm.entrypoints.cli")

    def start(acceptance=0.75, spec=True, name="laguna-s-2.1", rate=2000):
        monkeypatch.setenv("LAGUNA_STANDIN_ACCEPTANCE", str(acceptance))
        monkeypatch.setenv("LAGUNA_STANDIN_TOKENS_PER_S", str(rate))
        return http_server(cli.handler_for(standin.engine(name, 6 if spec else 0)))

    return start


# The Hub double (tests/doubles/hub/hub.py), in-process, with one repo shaped like the target's.
_spec = importlib.util.spec_from_file_location("hub_double", os.path.join(DOUBLES, "hub", "hub.py"))
hub_double = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hub_double)
HUB_REPO = "poolside/Laguna-S-2.1-FP8"


@pytest.fixture
def hub(tmp_path, http_server):
    """{endpoint, root (the repo's directory), log (one JSON line per request)} of a Hub double serving HUB_REPO."""
    root = tmp_path / "hub"
    hub_double.generate(str(root), HUB_REPO, 24, 4096)
    log = tmp_path / "hub.jsonl"
    endpoint = http_server(hub_double.handler_for(hub_double.Hub(str(root), log=str(log))))
    return {"endpoint": endpoint, "root": root / HUB_REPO, "log": log}
