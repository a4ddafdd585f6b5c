"""venv_pins_info / module_utils.venv_pins."""
import json
import subprocess
import sys

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import venv_pins
from ansible_collections.laguna.spark.plugins.modules import venv_pins_info

PINS = ["vllm==0.25.1", "torch==2.11.0+cu130", "huggingface_hub", "ninja"]


def test_unsatisfied():
    installed = venv_pins.installed_from_pip_list(json.dumps([
        {"name": "vLLM", "version": "0.25.1"}, {"name": "torch", "version": "2.11.0"},
        {"name": "huggingface-hub", "version": "1.5.0"}]))
    missing = venv_pins.unsatisfied(PINS, installed)
    assert [(m["name"], m["wanted"], m["installed"]) for m in missing] == [("torch", "2.11.0+cu130", "2.11.0"),
                                                                           ("ninja", None, None)]


def test_bad_pin():
    with pytest.raises(ValueError):
        venv_pins.parse_pin("vllm>=0.25")
    assert venv_pins.parse_pin("huggingface_hub[cli]==1.5.0") == ("huggingface-hub", "1.5.0")


def test_install_argv():
    assert venv_pins.pip_install_argv("/v/bin/python", ["a==1"], "http://127.0.0.1:1/simple", ["http://x/cu130"]) == [
        "/v/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
        "--index-url", "http://127.0.0.1:1/simple", "--extra-index-url", "http://x/cu130", "a==1"]


def test_module_on_a_real_venv(tmp_path, run_module):
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    result = run_module(venv_pins_info, {"venv": str(venv), "pins": ["pip", "vllm==0.25.1"]})
    assert result["exists"] and "pip" in result["installed"]
    assert [m["pin"] for m in result["missing"]] == ["vllm==0.25.1"]
    assert result["install_argv"][:4] == [str(venv / "bin" / "python"), "-m", "pip", "install"]


def test_module_without_venv(tmp_path, run_module):
    result = run_module(venv_pins_info, {"venv": str(tmp_path / "none"), "pins": PINS})
    assert not result["exists"] and len(result["missing"]) == 4
