"""One set of pins: the venv role's venv_pins, which the test tools read.

roles/venv/defaults/main.yml holds the pins. scripts/hf-venv.sh (the staging
tests' real `hf`) and scripts/node-index.sh (the molecule nodes' package
index) read huggingface_hub's (and Ray's) from there, so the `hf` the tests
run is the one the role installs on a Spark; the argument spec documents the
same default, and the README (and any docs/ page that names a version)
names the same one.
"""
import ast
import os
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import venv_pins

from helpers import ROOT

DEFAULTS = os.path.join(ROOT, "roles", "venv", "defaults", "main.yml")
SPECS = os.path.join(ROOT, "roles", "venv", "meta", "argument_specs.yml")


def role_pins():
    with open(DEFAULTS) as handle:
        pins = yaml.safe_load(handle)["venv_pins"]
    return {venv_pins.parse_pin(pin)[0]: pin for pin in pins}


def script(name, *args, root=ROOT):
    return subprocess.run(["bash", os.path.join(root, "scripts", name)] + list(args),
                          capture_output=True, text=True, timeout=60, check=False)


def test_huggingface_hub_is_pinned_exactly():
    pin = role_pins()["huggingface-hub"]
    assert venv_pins.parse_pin(pin) == ("huggingface-hub", "2.4.0"), pin


def test_argument_spec_default_is_the_defaults():
    with open(SPECS) as handle:
        spec = yaml.safe_load(handle)["argument_specs"]["main"]["options"]["venv_pins"]
    with open(DEFAULTS) as handle:
        assert spec["default"] == yaml.safe_load(handle)["venv_pins"]


def test_hf_venv_builds_the_role_pin():
    proc = script("hf-venv.sh", "--pin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == role_pins()["huggingface-hub"]


def test_node_index_offers_the_role_pins():
    proc = script("node-index.sh", "--pins")
    assert proc.returncode == 0, proc.stderr
    offered = dict(venv_pins.parse_pin(pin) for pin in proc.stdout.split())
    pins = dict(venv_pins.parse_pin(pin) for pin in role_pins().values())
    # vLLM and torch are stand-ins built by the script under their real names and versions.
    with open(os.path.join(ROOT, "scripts", "node-index.sh")) as handle:
        for name, version in re.findall(r'make_wheel\(wheels, "([^"]+)", "([^"]+)"', handle.read()):
            offered[venv_pins.normalize(name)] = version
    for name, version in pins.items():
        assert name in offered, "the node index offers no %s" % name
        if version is not None:
            assert offered[name] == version, "%s: role %s, node index %s" % (name, version, offered[name])
    assert offered["huggingface-hub"] == "2.4.0"


def test_integration_standin_index_offers_the_role_pins():
    """tests/integration/standin_wheels.py: the index the venv role's integration test installs from."""
    with open(os.path.join(ROOT, "tests", "integration", "standin_wheels.py")) as handle:
        tree = ast.parse(handle.read())
    standins = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["STANDINS"])
    offered = {venv_pins.normalize(dist): version for dist, version, _requires, _scripts in standins}
    for name, version in (venv_pins.parse_pin(pin) for pin in role_pins().values()):
        assert name in offered and version in (None, offered[name]), (name, version, offered.get(name))


@pytest.mark.parametrize("line", [
    "  - huggingface_hub\n",                                      # bare: any version
    "  - huggingface_hub>=2.4\n",                                 # a range
    "  - huggingface_hub==2.4.0\n  - huggingface_hub==2.5.0\n",   # twice
    "",                                                           # gone
])
def test_scripts_refuse_a_pin_they_cannot_share(tmp_path, line):
    """No fallback version anywhere: without one exact pin in the role, both scripts fail."""
    for name in ("hf-venv.sh", "node-index.sh"):
        (tmp_path / "scripts").mkdir(exist_ok=True)
        shutil.copy(os.path.join(ROOT, "scripts", name), tmp_path / "scripts" / name)
    (tmp_path / "roles" / "venv" / "defaults").mkdir(parents=True)
    with open(DEFAULTS) as handle:
        text = handle.read()
    assert text.count("  - huggingface_hub==2.4.0\n") == 1
    (tmp_path / "roles" / "venv" / "defaults" / "main.yml").write_text(
        text.replace("  - huggingface_hub==2.4.0\n", line))
    hf = script("hf-venv.sh", "--pin", root=str(tmp_path))
    assert hf.returncode != 0 and "huggingface_hub==VERSION" in hf.stderr
    index = script("node-index.sh", "--pins", root=str(tmp_path))
    assert index.returncode != 0 and "huggingface_hub==VERSION" in index.stderr


def test_readme_names_the_pinned_version():
    version = venv_pins.parse_pin(role_pins()["huggingface-hub"])[1]
    pages = ["README.md"] + sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs"))
                                   if name.endswith(".md"))
    named = {}
    for page in pages:
        with open(os.path.join(ROOT, page)) as handle:
            named[page] = re.findall(r"huggingface_hub (\d[\w.+]*)", handle.read())
    assert named["README.md"], "README.md no longer names huggingface_hub's version"
    for page, versions in named.items():
        assert set(versions) <= {version}, (page, versions, version)
