"""What the scripts share: scripts/checkout.py (this checkout's module_utils, loaded without the
collection), noop_ratio.molecule_parser (the options of the scripts that measure the test bed) and
noop_ratio.log_play_time (the fault suite's seconds per playbook run)."""
import json
import os
import sys

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import checkout  # noqa: E402  pylint: disable=wrong-import-position
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position


def test_checkout_loads_a_module_utils_file_of_this_checkout_on_its_own():
    assert checkout.ROOT == ROOT
    files = checkout.module_utils("files")
    assert files.__name__ == "laguna_files"
    assert files.__file__ == os.path.join(ROOT, "plugins", "module_utils", "files.py")
    assert files.read_text(os.path.join(ROOT, "scripts", "checkout.py")).startswith('"""This checkout')


def test_the_molecule_parser_takes_its_description_and_the_molecule_inventory(monkeypatch):
    monkeypatch.setenv("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp/scenario")
    parser = noop_ratio.molecule_parser("First paragraph,\non two lines.\n\nThe rest.")
    assert parser.description == "First paragraph,\non two lines."
    assert parser.parse_args([]).inventory == "/tmp/scenario/inventory"
    assert parser.parse_args(["-i", "inventory/sparks"]).inventory == "inventory/sparks"
    monkeypatch.delenv("MOLECULE_EPHEMERAL_DIRECTORY")
    assert noop_ratio.molecule_parser("x").parse_args([]).inventory == os.path.join(".", "inventory")


def test_each_playbook_run_is_logged_with_its_seconds_only_when_asked(tmp_path, monkeypatch):
    log = tmp_path / "m" / "plays.jsonl"
    monkeypatch.delenv("LAGUNA_PLAY_TIMES", raising=False)
    noop_ratio.log_play_time("laguna.spark.site", ("--tags", "x"), 1.23, 0)
    assert not log.exists()
    monkeypatch.setenv("LAGUNA_PLAY_TIMES", str(log))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "faults/test_x.py::test_y (call)")
    noop_ratio.log_play_time("laguna.spark.site", ("--tags", "x"), 1.234, 0)
    noop_ratio.log_play_time("laguna.spark.verify", (), 2.0, 2)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows == [{"test": "faults/test_x.py::test_y (call)", "playbook": "laguna.spark.site",
                     "args": ["--tags", "x"], "seconds": 1.2, "rc": 0},
                    {"test": "faults/test_x.py::test_y (call)", "playbook": "laguna.spark.verify",
                     "args": [], "seconds": 2.0, "rc": 2}]
