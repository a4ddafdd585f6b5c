"""The monitoring role's files rendered without Ansible, and promtool.

render_rules() renders roles/monitoring/templates/laguna-spark-rules.yml.j2
with Jinja2 as Ansible's template module does (trim_blocks), from the role's
defaults (defaults/main.yml; the two that default to the fabric role's
variables take the fabric role's defaults) and what render() of
plugins/module_utils/monitoring.py computes; prometheus_yml() is render()'s
prometheus.yml for the two nodes of inventory/sparks. promtool() is
scripts/promtool.sh's binary: the distribution's package, not installed.
"""

from __future__ import annotations

import os
import subprocess

import jinja2
import yaml

from helpers import ROOT

ROLE = os.path.join(ROOT, "roles", "monitoring")
RULES_TEMPLATE = os.path.join(ROLE, "templates", "laguna-spark-rules.yml.j2")
DASHBOARD = os.path.join(ROLE, "files", "laguna-spark-dashboard.json")
# The two nodes of inventory/sparks, as the role sees them on a DGX Spark.
TWINS = ["enp1s0f1np1", "enP2p1s0f1np1"]
NODES = [("spark-1", "192.168.100.1"), ("spark-2", "192.168.100.2")]


def _yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def role_defaults():
    """The role's defaults with literal values; the templated ones resolved as the role resolves them
    without the fabric role (fabric_mtu 9000, fabric_min_twins 2: the fabric role's own defaults), the
    ports from roles/laguna's laguna_monitoring_ports."""
    values = _yaml(os.path.join(ROLE, "defaults", "main.yml"))
    fabric = _yaml(os.path.join(ROOT, "roles", "fabric", "defaults", "main.yml"))
    ports = _yaml(os.path.join(ROOT, "roles", "laguna", "defaults", "main.yml"))["laguna_monitoring_ports"]
    values["monitoring_roce_mtu"] = fabric["fabric_mtu"]
    values["monitoring_roce_min_twins"] = fabric["fabric_min_twins"]
    values["monitoring_prometheus_port"] = ports["prometheus"]
    values["monitoring_node_exporter_port"] = ports["node_exporter"]
    return values


def hostvars(netdevs=None, mountpoint="/"):
    """Hostvars of the two nodes after the role's render.yml set monitoring_node_facts."""
    return dict((name, {"laguna_roce_ip": ip, "monitoring_node_facts": {
        "roce_ip": ip, "listen_addresses": ["127.0.0.1", ip], "netdevs": list(TWINS if netdevs is None else netdevs),
        "mountpoint": mountpoint}}) for name, ip in NODES)


def settings(values=None, is_head=True):
    """render()'s settings as tasks/render.yml passes them, from role variables."""
    v = dict(role_defaults(), **(values or {}))
    laguna = _yaml(os.path.join(ROOT, "roles", "laguna", "defaults", "main.yml"))
    return {
        "is_head": is_head, "head": NODES[0][0],
        "node_exporter": {"listen_addresses": ["127.0.0.1", NODES[0][1]], "port": v["monitoring_node_exporter_port"],
                          "extra_args": v["monitoring_node_exporter_extra_args"]},
        "prometheus": {"listen_address": v["monitoring_prometheus_listen_address"],
                       "port": v["monitoring_prometheus_port"], "retention_time": v["monitoring_retention_time"],
                       "retention_size": v["monitoring_retention_size"],
                       "extra_args": v["monitoring_prometheus_extra_args"]},
        "config_file": "/etc/prometheus/laguna-spark.yml", "rules_file": "/etc/prometheus/laguna-spark-rules.yml",
        "scrape_interval": v["monitoring_scrape_interval"], "evaluation_interval": v["monitoring_evaluation_interval"],
        "ray": v["monitoring_scrape_ray"], "ray_metrics_port": laguna["laguna_ray_ports"]["metrics_export"],
        "vllm_target": "127.0.0.1:%d" % laguna["laguna_api_port"], "window": v["monitoring_alert_window"],
        "roce_netdevs": v["monitoring_roce_netdevs"], "model_mountpoints": v["monitoring_model_mountpoints"],
        "fallback_netdevs": [laguna["laguna_roce_ifname"]],
    }


def render(values=None, netdevs=None, mountpoint="/"):
    from ansible_collections.laguna.spark.plugins.module_utils import monitoring
    return monitoring.render([name for name, _ip in NODES], hostvars(netdevs, mountpoint), settings(values))


def render_rules(values=None, netdevs=None, mountpoint="/"):
    """The rules file's text for the role's defaults overridden by ``values``."""
    variables = dict(role_defaults(), **(values or {}))
    variables["monitoring_render"] = render(values, netdevs, mountpoint)
    variables["ansible_managed"] = "Ansible managed"
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    with open(RULES_TEMPLATE) as handle:
        return env.from_string(handle.read()).render(**variables)


def prometheus_yml(values=None):
    """prometheus.yml's text, as the role writes it (YAML of render()'s dict)."""
    config = render(values)["prometheus_config"]
    return "# Ansible managed\n" + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def promtool():
    """scripts/promtool.sh's promtool (fetched once); a failure to get it fails the caller."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "promtool.sh")], capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise AssertionError("scripts/promtool.sh could not provide promtool:\n" + proc.stderr[-3000:])
    path = proc.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK), path
    return path
