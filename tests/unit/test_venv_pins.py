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


def _fake_dist(root, name, version, requires):
    info = root / ("%s-%s.dist-info" % (name, version))
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: %s" % name, "Version: %s" % version]
    lines += ["Requires-Dist: %s" % req for req in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def _extras_check(site, pins):
    """EXTRAS_CHECK run as the module runs it, by a python with pip (this one), on a site dir of fakes."""
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); exec(%r)"
                           % (str(site), venv_pins.EXTRAS_CHECK), json.dumps(venv_pins.extras_query(pins))],
                          capture_output=True, text=True, env=env, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_pin_with_extras_is_met_only_with_what_the_extras_add(tmp_path):
    """ray[default]==2.60.0 with Ray installed but not its default extra's requirements is not met
    (the metrics agent cannot run); with them it is. The base requirements and other extras'
    do not count, and a version outside the extra's specifier does."""
    _fake_dist(tmp_path, "ray", "2.60.0", [
        "click>=7.0", 'colorful; extra == "default"', 'aiohttp>=3.14.4; extra == "default"',
        'cupy-cuda12x; sys_platform != "darwin" and extra == "cgraph"'])
    _fake_dist(tmp_path, "aiohttp", "3.9.0", [])
    pins = ["ray[default]==2.60.0", "ninja"]
    assert venv_pins.pin_extras(pins[0]) == ["default"] and venv_pins.extras_query(pins) == [["ray", ["default"]]]
    found = _extras_check(tmp_path, pins)
    assert found == {"ray": ["colorful", "aiohttp>=3.14.4 (installed 3.9.0)"]}
    installed = {"ray": "2.60.0", "ninja": "1.13.2"}
    missing = venv_pins.unsatisfied(pins, installed, found)
    assert missing == [{"pin": "ray[default]==2.60.0", "name": "ray", "wanted": "2.60.0", "installed": "2.60.0",
                        "extras_missing": ["colorful", "aiohttp>=3.14.4 (installed 3.9.0)"]}]
    _fake_dist(tmp_path, "colorful", "0.5.6", [])
    _fake_dist(tmp_path, "aiohttp", "3.14.4", [])
    import shutil
    shutil.rmtree(tmp_path / "aiohttp-3.9.0.dist-info")
    found = _extras_check(tmp_path, pins)
    assert found == {"ray": []}
    assert venv_pins.unsatisfied(pins, installed, found) == []
    # Without the extra in the pin, Ray alone meets it.
    assert venv_pins.extras_query(["ray==2.60.0"]) == []
    assert venv_pins.unsatisfied(["ray==2.60.0"], installed, {"ray": ["colorful"]}) == []


def test_extras_of_a_distribution_not_installed(tmp_path):
    assert _extras_check(tmp_path, ["ray[default]==2.60.0"]) == {"ray": ["(not installed)"]}
