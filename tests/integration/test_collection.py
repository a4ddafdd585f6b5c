"""The collection as a whole: it builds, its docs parse, its roles are fully specified."""
import glob
import json
import os
import subprocess
import sys
import tarfile

import yaml

from conftest import ROOT

BIN = os.path.dirname(sys.executable)
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")))
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
ENV = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"))


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
    assert not any(name.startswith(("collections/", ".venv")) for name in names)


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
    for role in ["preflight", "linger", "staging", "vllm_patch", "ray_cluster", "vllm_serve"]:
        assert tagged[role] == [role]


def test_the_recipe_values_are_role_defaults():
    defaults = {role: load(os.path.join(ROOT, "roles", role, "defaults", "main.yml"))
                for role in ROLES if os.path.exists(os.path.join(ROOT, "roles", role, "defaults", "main.yml"))}
    common, serve, ray = defaults["common"], defaults["vllm_serve"], defaults["ray_cluster"]
    assert (common["laguna_hca"], common["laguna_roce_ifname"], common["laguna_api_port"]) == ("rocep1s0f1", "enp1s0f1np1", 8000)
    assert common["laguna_model_shards"] == 24
    assert serve["vllm_serve_num_speculative_tokens"] == 6
    assert serve["vllm_serve_max_model_len"] == 262144
    assert serve["vllm_serve_kv_cache_memory_bytes"] == 5368709120
    assert (serve["vllm_serve_max_num_seqs"], serve["vllm_serve_max_num_batched_tokens"]) == (2, 8192)
    assert (ray["ray_cluster_memory_high"], ray["ray_cluster_memory_max"], serve["vllm_serve_memory_max"]) == ("98G", "110G", "12G")
    assert ray["ray_cluster_memory_swap_max"] == serve["vllm_serve_memory_swap_max"] == "0"
    assert defaults["preflight"]["preflight_stray_pattern"] == "[v]llm serve"


def test_playbooks_pass_syntax_check():
    for playbook in ["site.yml", "playbooks/teardown.yml", "playbooks/verify.yml", "playbooks/benchmark.yml"]:
        subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", "inventory/sparks", playbook],
                       check=True, capture_output=True, cwd=ROOT, env=ENV)
