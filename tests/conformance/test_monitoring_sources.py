"""What the monitoring role relies on in vLLM 0.25.1's and Ray 2.60.0's own code.

* vLLM's /metrics needs no API key: the AuthenticationMiddleware guards only
  GUARDED_PREFIX (compared request by request with the stand-in in
  test_vllm_api_key.py; here: /metrics is outside it), so prometheus.yml
  carries no credentials.
* Every vLLM metric the rules and the dashboard read is registered by vLLM's
  PrometheusStatLogger with the labels they group by (the real exposition of
  probe_vllm_args.py, the vllm_probe fixture).
* Ray exports metrics only with ray[default]'s dependencies: `ray start` runs
  each node's dashboard agent with --minimal when
  get_dashboard_dependency_error() (an import of ray.dashboard.optional_deps,
  what monitoring_probe imports) fails, and a minimal agent persists -1
  as its metrics export port and loads no reporter module, which is what
  serves the port (namespace "ray", every address). The conformance venv
  holds vLLM and Ray without that extra: its Ray cannot export, and
  monitoring_probe (monitoring_node_info and the role's probe) says so with Ray's own error.
* Why static targets and not Ray's service discovery file: Ray writes
  prom_metrics_service_discovery.json only from the dashboard's head process
  (ReportHead), in the session directory under /tmp/ray, and lists only
  the nodes alive, so a dead node would vanish instead of being down; the
  distribution's prometheus.service has PrivateTmp=true besides.
"""

import ast
import json
import os
import re
import subprocess

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import monitoring as mon
from ansible_collections.laguna.spark.plugins.module_utils import monitoring_probe
from helpers import monitoring as helper


@pytest.fixture(scope="module")
def ray_src(vllm_python):
    out = subprocess.run(
        [vllm_python, "-c", "import importlib.util as u; print(u.find_spec('ray').submodule_search_locations[0])"],
        capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert os.path.isfile(os.path.join(out, "_private", "services.py")), out
    return out


def _read(*parts):
    with open(os.path.join(*parts)) as handle:
        return handle.read()


def _function(source, name):
    """The source of the top-level or method function ``name``."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node)
    raise AssertionError("no function %s" % name)


def test_vllm_guards_no_metrics_path(vllm_src):
    source = _read(vllm_src, "entrypoints", "serve", "utils", "server_utils.py")
    match = re.search(r"^GUARDED_PREFIX = (\(.*\))$", source, re.M)
    guarded = ast.literal_eval(match.group(1))
    assert guarded == ("/v1", "/v2", "/inference")
    assert not "/metrics".startswith(guarded)
    config = json.dumps(mon.prometheus_config({
        "scrape_interval": "15s", "evaluation_interval": "15s", "rules_file": "/r", "head": "h",
        "nodes": [{"name": "h", "roce_ip": "10.0.0.1", "listen_addresses": ["10.0.0.1"]}], "node_exporter_port": 9100,
        "ray": True, "ray_metrics_port": 6382, "vllm_target": "127.0.0.1:8000", "prometheus_target": "127.0.0.1:9090"}))
    assert "authorization" not in config and "credentials" not in config


def test_the_rules_and_the_dashboard_read_metrics_vllm_exports_with_their_labels(vllm_probe):
    real = vllm_probe["cases"]["rendered"]["metrics"]
    samples = {}
    for name, _labels, _value in real["samples"]:
        samples.setdefault(name, set())
    for name, labels, _value in real["samples"]:
        samples[name] |= set(labels)
    with open(helper.DASHBOARD) as handle:
        model = json.load(handle)
    exprs = [q["expr"] for p in mon.dashboard_queries(model) for q in p["queries"]]
    rules = yaml.safe_load(helper.render_rules())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = sorted(set(n for e in exprs for n in mon.metric_names(e) if n.startswith("vllm:")))
    assert len(used) >= 10
    for name in used:
        assert name in samples, "%s is not a metric vLLM 0.25.1 exports" % name
        # the rules group by model_name; per-position acceptance by position; histograms by le
        assert "model_name" in samples[name], name
    assert "position" in samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert "le" in samples["vllm:time_to_first_token_seconds_bucket"]


def test_ray_runs_a_minimal_agent_without_the_default_extra(ray_src):
    services = _read(ray_src, "_private", "services.py")
    start_raylet = _function(services, "start_raylet")
    assert re.search(r"if ray\._private\.utils\.get_dashboard_dependency_error\(\) is not None:\s*\n(\s*#.*\n)*"
                     r"\s*dashboard_agent_command\.append\(\"--minimal\"\)", start_raylet), start_raylet
    utils = _read(ray_src, "_private", "utils.py")
    check = _function(utils, "get_dashboard_dependency_error")
    assert monitoring_probe.RAY_DEPS_CHECK in check, check
    agent = _read(ray_src, "dashboard", "agent.py")
    init = _function(agent, "__init__")
    minimal = init[init.index("if not self.minimal:"):]
    assert "METRICS_EXPORT_PORT_NAME" in minimal and "-1" in minimal
    reporter = _read(ray_src, "dashboard", "modules", "reporter", "reporter_agent.py")
    assert re.search(r'namespace="ray",\s*port=dashboard_agent\.metrics_export_port,\s*'
                     r'address=get_localhost_ip\(\) if is_localhost\(self\._ip\) else ""', reporter)
    assert re.search(r"def is_minimal_module\(\):\s*return False", reporter)
    # --metrics-export-port is what the collection pins (laguna_ray_ports.metrics_export)
    assert '"--metrics-export-port"' in _read(ray_src, "scripts", "scripts.py")


def test_vllm_does_not_bring_what_rays_agent_needs(vllm_src, ray_src):
    """What ray.dashboard.optional_deps imports that neither Ray's nor vLLM 0.25.1's own requirements name:
    a venv of the two (the venv role's pins) runs minimal agents."""
    tree = ast.parse(_read(ray_src, "dashboard", "optional_deps.py"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert {"aiohttp_cors", "opencensus", "opentelemetry"} <= imported

    def requirements(dist_info):
        found = set()
        for line in _read(dist_info, "METADATA").splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line:
                found.add(re.split(r"[\s\[<>=!~;(]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-"))
        return found

    site = os.path.dirname(vllm_src)
    vllm_requires = requirements(os.path.join(site, "vllm-0.25.1.dist-info"))
    ray_requires = requirements(os.path.join(site, "ray-2.60.0.dist-info"))
    assert "aiohttp" in vllm_requires and "opentelemetry-sdk" in vllm_requires
    for missing in ("aiohttp-cors", "opencensus", "opentelemetry-exporter-prometheus"):
        assert missing not in vllm_requires | ray_requires, missing


def test_the_conformance_venvs_ray_cannot_export_and_the_module_says_why(vllm_python):
    """The conformance venv has vLLM 0.25.1 and plain ray 2.60.0 (tests/conformance/requirements.txt)."""
    def run_command(argv, environ_update=None):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                              env=dict(os.environ, **(environ_update or {})))
        return proc.returncode, proc.stdout, proc.stderr

    error = monitoring_probe.ray_agent_error(run_command, vllm_python)
    assert error.startswith("ModuleNotFoundError: No module named"), error


def test_rays_service_discovery_file_lists_only_live_nodes_from_the_dashboard_head(ray_src):
    agent = _read(ray_src, "_private", "metrics_agent.py")
    content = _function(agent, "get_file_discovery_content")
    assert 'if node["alive"] is True' in content
    assert '[{"labels": {"job": "ray"}, "targets": metrics_export_addresses}]' in content
    assert "os.path.join(\n            self.session_dir," in _function(agent, "get_target_file_name")
    head = _read(ray_src, "dashboard", "modules", "reporter", "reporter_head.py")
    assert "self.service_discovery = PrometheusServiceDiscoveryWriter(" in head
    # The collection scrapes every node's export port as a static target instead.
    config = helper.render()["prometheus_config"]
    ray = [job for job in config["scrape_configs"] if job["job_name"] == "ray"][0]
    assert "file_sd_configs" not in ray and [c["targets"] for c in ray["static_configs"]] == [
        ["%s:6382" % ip] for _name, ip in helper.NODES]
