"""Render what the collection runs for the default inventory, without a Spark.

Runs the roles' own `render` task files (the ones their main tasks use to
start the raylets and vllm serve) with ansible-playbook on localhost, for a
copy of inventory/sparks where both nodes are local connections. Each node
gets a fake RoCE sysfs tree (the worker's GID index differs from the head's,
as on real Sparks). The service user is the user running the tests; paths
are compared after replacing its home by the recipe's `~`.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys

import yaml

from helpers.collection import collections_path
from helpers.sysfs import spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "inventory", "sparks")

PLAY = """
- name: Render the default deployment
  hosts: spark_head:spark_workers
  gather_facts: false
  tasks:
    - name: Raylet
      ansible.builtin.include_role:
        name: laguna.spark.ray_cluster
        tasks_from: render
        public: true
    - name: vllm serve
      ansible.builtin.include_role:
        name: laguna.spark.vllm_serve
        tasks_from: render
        public: true
      when: laguna_is_head
    - name: Defaults of the other roles
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop: "{{ render_defaults }}"
    - name: Write what this node runs
      ansible.builtin.copy:
        dest: "{{ render_out }}/{{ inventory_hostname }}.json"
        mode: "0644"
        content: "{{ render_facts | to_nice_json }}"
      vars:
        render_facts:
          home: "{{ laguna_home }}"
          user: "{{ laguna_user }}"
          is_head: "{{ laguna_is_head }}"
          roce_ip: "{{ laguna_roce_ip }}"
          gid_index: "{{ fabric_env_gid_index }}"
          gid_policy: "{{ fabric_facts.gid_policy }}"
          ray: "{{ ray_cluster_render }}"
          vllm_serve: "{{ vllm_serve_render | default(None) }}"
          vars: "{{ dict(render_var_names | zip(render_var_names | map('extract', vars))) }}"
"""

# Role variables the recipe comparison reads besides the rendered commands.
VAR_NAMES = [
    "laguna_model_repo", "laguna_model_path", "laguna_draft_repo", "laguna_draft_path",
    "laguna_model_shards", "laguna_venv", "laguna_api_port",
    "vllm_serve_served_model_name", "vllm_serve_smoke_prompt", "vllm_serve_smoke_max_tokens",
    "vllm_serve_smoke_expect",
    "staging_artifacts", "staging_rsync_options", "staging_ssh_cipher", "staging_ssh_options",
    "preflight_stray_pattern",
]
ROLE_DEFAULTS = ["staging", "preflight", "linger"]


def head_and_worker_sysfs(base):
    """Fake sysfs of two Sparks: {roce_ip: (infiniband dir, net dir)}.

    Each has both PCIe twins of its cabled port, each twin with an address
    of its own. On the worker an older address came first, so its RoCE v2
    GID for 192.168.100.2 is at index 5, where the head's is at 3.
    """
    return {
        "192.168.100.1": spark(os.path.join(base, "sys-head"), "192.168.100.1", "192.168.101.1"),
        "192.168.100.2": spark(os.path.join(base, "sys-worker"), "192.168.100.2", "192.168.101.2",
                               extra="10.0.0.7"),
    }


def render_default_deployment(workdir, user=None, host_vars=None, extra_vars=None):
    """{host: what the collection renders there} for inventory/sparks.

    ``host_vars`` ({host: {variable: value}}) are added to a host's
    host_vars (e.g. another fabric_gid_policy on one node), ``extra_vars``
    to the run's -e.

    Returns {"hosts": {name: facts}, "head": name, "workers": [names],
    "sysfs": {roce_ip: fake sysfs path}}.
    """
    user = user or getpass.getuser()
    inv = os.path.join(workdir, "inventory")
    shutil.copytree(INVENTORY, inv)
    with open(os.path.join(INVENTORY, "hosts.yml")) as fh:
        hosts = yaml.safe_load(fh)
    groups = hosts["all"]["children"]["sparks"]["children"]
    head = list(groups["spark_head"]["hosts"])[0]
    workers = list(groups["spark_workers"]["hosts"])
    assert len(workers) == 1, "the recipe has two nodes"
    trees = head_and_worker_sysfs(workdir)
    os.makedirs(os.path.join(inv, "host_vars"), exist_ok=True)
    roce = {}
    for name in [head] + workers:
        address = groups["spark_head" if name == head else "spark_workers"]["hosts"][name]["laguna_roce_ip"]
        ib, net = trees[address]
        roce[address] = ib
        with open(os.path.join(inv, "host_vars", name + ".yml"), "w") as fh:
            yaml.safe_dump(dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                 "laguna_user": user, "laguna_sysfs_infiniband": ib, "fabric_sysfs_net": net},
                                **(host_vars or {}).get(name, {})), fh)
    out = os.path.join(workdir, "out")
    os.makedirs(out)
    play = os.path.join(workdir, "render.yml")
    with open(play, "w") as fh:
        fh.write(PLAY)
    extra = dict(extra_vars or {})
    extra.update({"render_out": out, "render_var_names": VAR_NAMES,
                  "render_defaults": [os.path.join(ROOT, "roles", r, "defaults", "main.yml") for r in ROLE_DEFAULTS]})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([playbook, "-i", inv, play, "-e", json.dumps(extra)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError("rendering failed:\n" + proc.stdout[-4000:] + proc.stderr[-2000:])
    rendered = {}
    for name in [head] + workers:
        with open(os.path.join(out, name + ".json")) as fh:
            rendered[name] = json.load(fh)
    return {"hosts": rendered, "head": head, "workers": workers, "sysfs": roce}
