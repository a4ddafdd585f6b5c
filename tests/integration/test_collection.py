"""The collection as a whole: it builds, its docs parse, its roles are fully specified."""
import glob
import json
import os
import subprocess
import sys
import tarfile

import yaml

from helpers import ROOT
from helpers.collection import collections_path

BIN = os.path.dirname(sys.executable)
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")))
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
ENV = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path())


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def test_galaxy_build(tmp_path):
    subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), ROOT],
                   check=True, capture_output=True, env=ENV)
    (tarball,) = glob.glob(str(tmp_path / "laguna-spark-*.tar.gz"))
    names = tarfile.open(tarball).getnames()
    assert "plugins/modules/roce_gid.py" in names and "roles/ray_cluster/tasks/main.yml" in names
    assert "playbooks/site.yml" in names
    # build_ignore: tests, venvs, caches and dev tooling stay out of the tarball.
    assert not [name for name in names if name.split("/")[0] in (
        "tests", "molecule", "scripts", ".venv", ".cache", ".git", "changelogs/.plugin-cache.yaml")]
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert "LICENSE" in names and "changelogs/changelog.yaml" in names and "meta/runtime.yml" in names


def test_every_module_is_documented():
    out = subprocess.run([os.path.join(BIN, "ansible-doc"), "--json"] + ["laguna.spark." + m for m in MODULES],
                         check=True, capture_output=True, text=True, env=ENV).stdout
    docs = json.loads(out)
    assert sorted(docs) == ["laguna.spark." + m for m in MODULES]
    for name, doc in docs.items():
        assert doc["doc"]["short_description"] and doc["examples"] and doc["return"], name


def test_every_role_default_is_in_its_argument_spec():
    for role in ROLES:
        base = os.path.join(ROOT, "roles", role)
        specs = load(os.path.join(base, "meta", "argument_specs.yml"))["argument_specs"]
        defaults = load(os.path.join(base, "defaults", "main.yml")) if os.path.exists(
            os.path.join(base, "defaults", "main.yml")) else {}
        missing = set(defaults) - set(specs["main"]["options"])
        assert not missing, "%s: defaults without argument spec: %s" % (role, sorted(missing))


def test_every_recipe_role_has_its_own_tag():
    plays = load(os.path.join(ROOT, "playbooks", "site.yml"))
    tagged = {entry["role"].split(".")[-1]: entry["tags"] for play in plays for entry in play.get("roles", [])}
    order = ["preflight", "venv", "ssh_mesh", "fabric", "network_gate", "linger", "staging", "vllm_patch",
             "firewall", "ray_cluster", "vllm_serve", "monitoring"]
    # The shared checks first, whatever --tags select; then the recipe's order, bare node first; then
    # monitoring (not in the recipe; it does nothing unless laguna_monitoring), which scrapes what runs.
    assert list(tagged) == ["laguna"] + order
    assert tagged["laguna"] == ["always"]
    for role in order:
        assert tagged[role] == [role]


def test_playbooks_pass_syntax_check():
    for playbook in ["site.yml", "playbooks/teardown.yml", "playbooks/verify.yml", "playbooks/benchmark.yml",
                     "playbooks/status.yml"]:
        subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", "inventory/sparks", playbook],
                       check=True, capture_output=True, cwd=ROOT, env=ENV)
