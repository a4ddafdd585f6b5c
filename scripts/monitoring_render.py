"""Render the monitoring role's files for inventory/sparks, as the role does, without a Spark.

    python3 scripts/monitoring_render.py OUTDIR [-e JSON]

Runs the role's own render tasks (roles/monitoring/tasks/render.yml: its
node info module, the fabric role's discovery of the twins over a fake RoCE
sysfs tree per node, the monitoring_render filter) with ansible-playbook on
localhost for a copy of inventory/sparks whose two nodes are local
connections, with laguna_monitoring on and the role's defaults, then writes
into OUTDIR what the head gets: prometheus.yml (its rule_files pointing at
OUTDIR/rules.yml), rules.yml (the role's template), prometheus.default and
node-exporter.default. scripts/lint.sh checks them with `promtool check
config` and `promtool check rules`. Needs the collection installed
(ANSIBLE_COLLECTIONS_PATH, as scripts/lint.sh and the tests set it).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.render import INVENTORY, head_and_worker_sysfs  # noqa: E402  (tests/helpers: the fake sysfs trees)

PLAY = """
- name: Render the monitoring role's files
  hosts: spark_head:spark_workers
  gather_facts: false
  tasks:
    - name: What the daemons run
      ansible.builtin.include_role:
        name: laguna.spark.monitoring
        tasks_from: render
        public: true
    - name: Write the head's files
      ansible.builtin.copy:
        dest: "{{ render_out }}/{{ item.name }}"
        mode: "0644"
        content: "{{ item.content }}"
      loop:
        - name: prometheus.yml
          content: "{{ monitoring_render.prometheus_config | combine({'rule_files': [render_out ~ '/rules.yml']})
                       | to_nice_yaml(indent=2, sort_keys=false) }}"
        - name: rules.yml
          content: "{{ lookup('ansible.builtin.template', render_rules_template) }}"
        - name: prometheus.default
          content: "{{ monitoring_render.prometheus_default }}"
        - name: node-exporter.default
          content: "{{ monitoring_render.node_exporter_default }}"
      loop_control:
        label: "{{ item.name }}"
      when: laguna_is_head
"""


def render(out, extra_vars=None, collections_path=None):
    """Render into ``out``; returns ansible-playbook's output. Raises on failure."""
    collections_path = collections_path or os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")
    template = None
    for base in collections_path.split(":"):
        candidate = os.path.join(base, "ansible_collections", "laguna", "spark", "roles", "monitoring",
                                 "templates", "laguna-spark-rules.yml.j2")
        if base and os.path.isfile(candidate):
            template = candidate
            break
    if template is None:
        raise SystemExit("monitoring_render: laguna.spark is not installed under ANSIBLE_COLLECTIONS_PATH=%r"
                         % collections_path)
    work = tempfile.mkdtemp(prefix="laguna-monitoring-render-")
    try:
        inv = os.path.join(work, "inventory")
        shutil.copytree(INVENTORY, inv)
        with open(os.path.join(INVENTORY, "hosts.yml")) as handle:
            groups = yaml.safe_load(handle)["all"]["children"]["sparks"]["children"]
        trees = head_and_worker_sysfs(work)
        os.makedirs(os.path.join(inv, "host_vars"), exist_ok=True)
        user = getpass.getuser()
        for group in ("spark_head", "spark_workers"):
            for name, host in groups[group]["hosts"].items():
                ib, net = trees[host["laguna_roce_ip"]]
                with open(os.path.join(inv, "host_vars", name + ".yml"), "w") as handle:
                    yaml.safe_dump({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                    "laguna_user": user, "laguna_sysfs_infiniband": ib, "fabric_sysfs_net": net},
                                   handle)
        play = os.path.join(work, "render.yml")
        with open(play, "w") as handle:
            handle.write(PLAY)
        extra = {"laguna_monitoring": True, "laguna_fast_noop": False}
        extra.update(extra_vars or {})
        extra.update({"render_out": os.path.abspath(out), "render_rules_template": template})
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
        if not os.access(playbook, os.X_OK):
            playbook = shutil.which("ansible-playbook") or playbook
        proc = subprocess.run([playbook, "-i", inv, play, "-e", json.dumps(extra)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError("rendering failed:\n" + proc.stdout[-6000:] + proc.stderr[-3000:])
        return proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("out", help="directory to write the files into")
    parser.add_argument("-e", "--extra-vars", default="{}", help="JSON of further variables")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        render(args.out, json.loads(args.extra_vars))
    except RuntimeError as exc:
        sys.stderr.write("%s\n" % exc)
        return 1
    for name in sorted(os.listdir(args.out)):
        print(os.path.join(args.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
