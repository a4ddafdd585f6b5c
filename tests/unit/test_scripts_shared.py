"""What the scripts share: scripts/checkout.py (this checkout's module_utils, loaded without the
collection) and noop_ratio.molecule_parser (the options of the scripts that measure the test bed)."""
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
