"""monitoring: the role's decisions, the dashboard, and what reads Prometheus.

plugins/module_utils/monitoring.py directly (the daemons' arguments,
prometheus.yml, what the head renders from every node's facts, the status
table, the dashboard's queries); the shipped dashboard (a stable uid, a
Prometheus datasource variable, a query in every panel, every query parsed
by promtool, every metric name one the sources export); the modules
in-process, monitoring_status and scripts/dashboard_check.py against the
Prometheus API double (tests/doubles/prometheus_api.py), monitoring_node_info
against this machine's dpkg and fake venv pythons. The same readers against
the real Prometheus: tests/integration/test_monitoring_prometheus.py.
"""

import importlib.util
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import monitoring as mon
from ansible_collections.laguna.spark.plugins.module_utils import monitoring_probe
from ansible_collections.laguna.spark.plugins.modules import monitoring_node_info, monitoring_status
from helpers import DOUBLES, ROOT, free_port, standin
from helpers import monitoring as helper

# What the node exporter exports under the names the rules and the dashboard use
# (node exporter 1.5 and 1.7; tests/integration/test_monitoring_prometheus.py reads them
# from the real one).
NODE_EXPORTER_NAMES = {"node_network_mtu_bytes", "node_network_up", "node_network_receive_bytes_total",
                       "node_network_transmit_bytes_total", "node_filesystem_avail_bytes",
                       "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"}


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prometheus_api = _load(os.path.join(DOUBLES, "prometheus_api.py"), "prometheus_api")
dashboard_check = _load(os.path.join(ROOT, "scripts", "dashboard_check.py"), "dashboard_check")


@pytest.fixture
def prometheus(http_server):
    """start(api) -> base URL of the Prometheus API double on 127.0.0.1."""
    return lambda api: http_server(prometheus_api.handler_for(api))


@pytest.fixture(scope="module")
def model():
    with open(helper.DASHBOARD) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def standin_names():
    """Every sample name of the stand-in vLLM's /metrics (compared with vLLM 0.25.1's own by
    tests/conformance/test_vllm_metrics.py)."""
    engine = standin.engine("m")
    engine.counters["accepted_per_pos"] = [1] * 6
    return {line.split("{")[0].split(" ")[0] for line in engine.metrics().splitlines() if not line.startswith("#")}


# --- The daemons' arguments --------------------------------------------------------

def test_the_default_files_hold_one_args_line_of_safe_words():
    text = mon.default_file("prometheus", mon.prometheus_args({
        "listen_address": "127.0.0.1", "port": 9090, "config_file": "/etc/prometheus/laguna-spark.yml",
        "retention_time": "15d", "retention_size": "4GB", "extra_args": ["--web.enable-lifecycle"]}))
    assert text.splitlines()[-1] == (
        'ARGS="--config.file=/etc/prometheus/laguna-spark.yml --web.listen-address=127.0.0.1:9090 '
        '--storage.tsdb.retention.time=15d --storage.tsdb.retention.size=4GB --web.enable-lifecycle"')
    assert [line for line in text.splitlines() if not line.startswith("#")] == [text.splitlines()[-1]]
    args = mon.node_exporter_args({"listen_addresses": ["127.0.0.1", "192.168.100.1", "::1"], "port": 9100,
                                   "extra_args": []})
    assert args == ["--web.listen-address=127.0.0.1:9100", "--web.listen-address=192.168.100.1:9100",
                    "--web.listen-address=[::1]:9100"]


@pytest.mark.parametrize("arg", ["--a=b c", '--a="b"', "--a='b'", "--a=\\d", "--a=`id`", "--a=$HOME", "--a=${X}",
                                 "--a=$(id)", ""])
def test_an_argument_the_unit_would_split_or_the_init_script_expand_is_refused(arg):
    with pytest.raises(ValueError, match="ARGS line"):
        mon.node_exporter_args({"listen_addresses": ["127.0.0.1"], "port": 9100, "extra_args": [arg]})


def test_a_regex_with_dollar_anchors_is_a_safe_argument():
    arg = "--collector.filesystem.fs-types-exclude=^(autofs|proc|sysfs|tmpfs)$"
    assert mon.node_exporter_args({"listen_addresses": ["127.0.0.1"], "port": 9100, "extra_args": [arg]})[-1] == arg


@pytest.mark.parametrize("key,value", [("retention_time", "15"), ("retention_time", "0s"), ("retention_size", "4G")])
def test_bad_retention_is_refused(key, value):
    settings = {"listen_address": "127.0.0.1", "port": 9090, "config_file": "/c", "retention_time": "15d",
                "retention_size": "", "extra_args": []}
    with pytest.raises(ValueError, match=key):
        mon.prometheus_args(dict(settings, **{key: value}))


def test_the_node_exporter_needs_an_address():
    with pytest.raises(ValueError, match="at least one listen address"):
        mon.node_exporter_args({"listen_addresses": [], "port": 9100})


# --- prometheus.yml ------------------------------------------------------------------

NODES = [{"name": "spark-1", "roce_ip": "192.168.100.1", "listen_addresses": ["127.0.0.1", "192.168.100.1"]},
         {"name": "spark-2", "roce_ip": "192.168.100.2", "listen_addresses": ["0.0.0.0"]}]
CONFIG = {"scrape_interval": "15s", "evaluation_interval": "15s", "rules_file": "/etc/prometheus/r.yml",
          "head": "spark-1", "nodes": NODES, "node_exporter_port": 9100, "ray": True, "ray_metrics_port": 6382,
          "vllm_target": "127.0.0.1:8000", "prometheus_target": "127.0.0.1:9090"}


def test_every_source_is_a_job_and_every_target_names_its_node():
    config = mon.prometheus_config(CONFIG)
    jobs = dict((job["job_name"], job["static_configs"]) for job in config["scrape_configs"])
    assert sorted(jobs) == sorted(mon.JOBS)
    assert jobs["vllm"] == [{"targets": ["127.0.0.1:8000"], "labels": {"node": "spark-1"}}]
    assert jobs["node"] == [{"targets": ["192.168.100.1:9100"], "labels": {"node": "spark-1"}},
                            {"targets": ["192.168.100.2:9100"], "labels": {"node": "spark-2"}}]
    assert jobs["ray"] == [{"targets": ["192.168.100.1:6382"], "labels": {"node": "spark-1"}},
                           {"targets": ["192.168.100.2:6382"], "labels": {"node": "spark-2"}}]
    assert config["global"] == {"scrape_interval": "15s", "scrape_timeout": "10s", "evaluation_interval": "15s"}
    assert config["rule_files"] == ["/etc/prometheus/r.yml"]
    without_ray = mon.prometheus_config(dict(CONFIG, ray=False))
    assert "ray" not in [job["job_name"] for job in without_ray["scrape_configs"]]


def test_the_scrape_timeout_never_exceeds_the_interval():
    assert mon.prometheus_config(dict(CONFIG, scrape_interval="5s"))["global"]["scrape_timeout"] == "5s"
    assert mon.prometheus_config(dict(CONFIG, scrape_timeout="3s"))["global"]["scrape_timeout"] == "3s"
    with pytest.raises(ValueError, match="no longer than scrape_interval"):
        mon.prometheus_config(dict(CONFIG, scrape_interval="5s", scrape_timeout="10s"))
    with pytest.raises(ValueError, match="scrape_interval"):
        mon.prometheus_config(dict(CONFIG, scrape_interval="15"))


def test_a_node_exporter_not_listening_on_the_roce_address_names_the_fix():
    nodes = [NODES[0], dict(NODES[1], listen_addresses=["127.0.0.1"])]
    with pytest.raises(ValueError, match="spark-2 listens on 127.0.0.1, not on its RoCE address 192.168.100.2.*"
                                         "monitoring_node_exporter_listen_addresses"):
        mon.prometheus_config(dict(CONFIG, nodes=nodes))
    with pytest.raises(ValueError, match="the head spark-9"):
        mon.prometheus_config(dict(CONFIG, head="spark-9"))


def test_the_rendered_config_passes_promtool(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(helper.render_rules())
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(dict(mon.prometheus_config(CONFIG), rule_files=[str(rules)]), sort_keys=False))
    proc = subprocess.run([helper.promtool(), "check", "config", str(config)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- What the head renders from every node's facts ------------------------------------

def test_a_worker_renders_its_node_exporter_only():
    out = mon.render(["spark-1", "spark-2"], helper.hostvars(), helper.settings(is_head=False))
    assert out["prometheus_default"] is None and out["prometheus_config"] is None and out["rules"] is None
    assert "--web.listen-address=192.168.100.1:9100" in out["node_exporter_default"]


def test_the_head_takes_the_twins_and_mount_points_every_node_found():
    hostvars = helper.hostvars()
    hostvars["spark-2"]["monitoring_node_facts"] = dict(hostvars["spark-2"]["monitoring_node_facts"],
                                                        netdevs=["enp1s0f0np0"], mountpoint="/data")
    rules = mon.render(["spark-1", "spark-2"], hostvars, helper.settings())["rules"]
    assert rules["roce_netdevs"] == sorted(helper.TWINS + ["enp1s0f0np0"])
    assert rules["roce_devices"] == "enP2p1s0f1np1|enp1s0f0np0|enp1s0f1np1"
    assert rules["model_mountpoints"] == "/|/data" and rules["window"] == "5m"
    given = helper.settings({"monitoring_roce_netdevs": ["eth0"], "monitoring_model_mountpoints": ["/srv"]})
    rules = mon.render(["spark-1", "spark-2"], hostvars, given)["rules"]
    assert (rules["roce_devices"], rules["model_mountpoints"]) == ("eth0", "/srv")


def test_a_node_outside_the_play_is_scraped_at_its_roce_address():
    hostvars = helper.hostvars()
    del hostvars["spark-2"]["monitoring_node_facts"]
    out = mon.render(["spark-1", "spark-2"], hostvars, helper.settings())
    node_job = [j for j in out["prometheus_config"]["scrape_configs"] if j["job_name"] == "node"][0]
    assert node_job["static_configs"][1]["targets"] == ["192.168.100.2:9100"]
    assert out["rules"]["roce_netdevs"] == sorted(helper.TWINS)
    with pytest.raises(ValueError, match="spark-2 has no laguna_roce_ip"):
        mon.cluster_nodes(["spark-2"], {"spark-2": {}})


def test_without_twins_found_the_roce_ifname_is_watched_and_without_a_mount_point_it_fails():
    out = mon.render(["spark-1", "spark-2"], helper.hostvars(netdevs=[]), helper.settings())
    assert out["rules"]["roce_netdevs"] == ["enp1s0f1np1"]
    with pytest.raises(ValueError, match="monitoring_model_mountpoints"):
        mon.render(["spark-1", "spark-2"], helper.hostvars(mountpoint=None), helper.settings())


def test_prometheus_scrapes_itself_on_loopback_when_it_listens_everywhere():
    out = mon.render(["spark-1", "spark-2"], helper.hostvars(),
                     helper.settings({"monitoring_prometheus_listen_address": "0.0.0.0"}))
    self_job = out["prometheus_config"]["scrape_configs"][0]
    assert self_job["static_configs"][0]["targets"] == ["127.0.0.1:9090"]
    assert "--web.listen-address=0.0.0.0:9090" in out["prometheus_default"]


def test_the_render_filter_names_its_errors():
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel

    hosts = ["spark-1", "spark-2"]
    rendered, unknown, not_a_list, lacking, bad = run_filter("monitoring_render", "monitoring_render", [
        [hosts, helper.hostvars(), helper.settings()], [hosts + ["spark-9"], helper.hostvars(), helper.settings()],
        ["spark-1", helper.hostvars(), helper.settings()],
        [hosts, helper.hostvars(), dict((k, v) for k, v in helper.settings().items() if k != "window")],
        [hosts, helper.hostvars(), dict(helper.settings(), scrape_interval="15")]])
    assert rendered == json.loads(json.dumps(mon.render(hosts, helper.hostvars(), helper.settings())))
    assert unknown.endswith("monitoring_render: spark-9 is not in the inventory")
    assert "the input must be a list of inventory host names" in not_a_list
    assert lacking.endswith("monitoring_render: the settings lack 'window'")
    assert bad.endswith("monitoring_render: scrape_interval '15' is not a Prometheus duration such as 15s")


def test_durations():
    assert mon.is_duration("15s") and mon.is_duration("1m30s") and mon.is_duration("15d")
    assert not mon.is_duration("0s") and not mon.is_duration("15") and not mon.is_duration("")
    assert mon.seconds("1m30s") == 90 and mon.seconds("250ms") == 0.25


# --- The dashboard ----------------------------------------------------------------------

def test_the_dashboard_has_its_stable_uid_and_a_prometheus_datasource_variable(model):
    assert model["uid"] == mon.DASHBOARD_UID == "laguna-spark-overview"
    variables = dict((v["name"], v) for v in model["templating"]["list"])
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in model["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_every_panel_has_a_query_and_the_issue_asks_for_each_panel(model):
    panels = mon.dashboard_queries(model)
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["queries"] and all(q["expr"].strip() for q in panel["queries"]), panel["title"]
    titles = [p["title"] for p in panels]
    assert titles == ["Generated tokens/s", "Time to first token", "Inter-token latency", "Spec-decode acceptance",
                      "Acceptance per draft position", "Tokens per step", "KV-cache usage",
                      "Running and waiting requests", "Ray nodes alive", "RoCE bytes per twin", "Memory per node"]


def test_every_query_parses_with_promtool(model, tmp_path):
    """promtool check rules parses each query, expanded as Grafana sends it, as a recording rule."""
    variables = mon.template_variables(model)
    assert variables["roce_devices"] == "enp1s0f1np1|enP2p1s0f1np1"
    rules = [{"record": "laguna:panel_%s_%s" % (p["id"], q["ref"]), "expr": mon.expand(q["expr"], variables, "1m")}
             for p in mon.dashboard_queries(model) for q in p["queries"]]
    assert not any("$" in rule["expr"] for rule in rules)
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    proc = subprocess.run([helper.promtool(), "check", "rules", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and "%d rules found" % len(rules) in proc.stdout, proc.stdout + proc.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "p", "rules": [{"record": "x", "expr": "sum(rate(up[1m])"}]}]}))
    assert subprocess.run([helper.promtool(), "check", "rules", str(broken)], capture_output=True,
                          timeout=60, check=False).returncode != 0


def _rule_exprs():
    doc = yaml.safe_load(helper.render_rules())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def test_every_metric_the_dashboard_and_the_rules_read_is_exported(model, standin_names):
    """vLLM's names as the stand-in exports them (vLLM 0.25.1's, by the conformance test), the node
    exporter's, and `up`; Ray is read only through `up` of its job."""
    known = standin_names | NODE_EXPORTER_NAMES | {"up"}
    exprs = [q["expr"] for p in mon.dashboard_queries(model) for q in p["queries"]] + _rule_exprs()
    used = set(name for expr in exprs for name in mon.metric_names(expr))
    assert "vllm:time_to_first_token_seconds_bucket" in used and "node_network_mtu_bytes" in used
    assert sorted(used - known) == []


def test_metric_names_leave_out_functions_labels_and_numbers():
    expr = ('histogram_quantile(0.95, sum by (node, le) (rate(vllm:x_bucket{job="vllm", le=~"1e9"}[5m]))) > 1e9 '
            'and on (node) count by (node) (up{job="node"} == 1) or vector(0) / ignoring (position) group_left () '
            'node_memory_MemTotal_bytes offset 5m')
    assert mon.metric_names(expr) == ["vllm:x_bucket", "up", "node_memory_MemTotal_bytes"]


def test_expand_replaces_the_rate_interval_and_the_variables():
    expr = 'rate(x{device=~"$roce_devices"}[$__rate_interval]) + rate(y{d=~"${roce_devices}"}[${__rate_interval}])'
    assert mon.expand(expr, {"roce_devices": "eth0|eth1", "roce": "no"}, "30s") == \
        'rate(x{device=~"eth0|eth1"}[30s]) + rate(y{d=~"eth0|eth1"}[30s])'


# --- The status table ------------------------------------------------------------------------

def _results():
    head = {"node": "spark-1"}
    return {
        "up": [(dict(job="vllm", **head), 1.0), (dict(job="node", **head), 1.0), (dict(job="ray", **head), 1.0),
               ({"job": "node", "node": "spark-2"}, 1.0), ({"job": "ray", "node": "spark-2"}, 0.0),
               ({"job": "prometheus", "node": "spark-1"}, 1.0)],
        "tok_s": [(head, 59.94)], "acceptance": [(head, 0.622)], "ttft_p50": [(head, 0.7)],
        "ttft_p95": [(head, float("nan"))], "kv_usage": [(head, 0.125)], "running": [(head, 1.0)],
        "memory_used": [(head, 81e9), ({"node": "spark-2"}, 74e9)],
    }


FIRING = [{"labels": {"alertname": "LagunaRayNodeDown", "node": "spark-2", "severity": "critical",
                      "instance": "192.168.100.2:6382"},
           "annotations": {"summary": "Ray's metrics at 192.168.100.2:6382 do not answer.", "action": "Run verify."},
           "state": "firing", "activeAt": "2026-01-01T00:00:00Z", "value": "0e+00"},
          {"labels": {"alertname": "LagunaTtftHigh", "node": "spark-1"}, "annotations": {}, "state": "pending"}]


def test_status_rows_per_node_with_missing_figures_as_none():
    rows, other = mon.status(["spark-1", "spark-2"], "spark-1", _results(), FIRING)
    head, worker = rows
    assert other == []
    assert head["role"] == "head" and head["targets"] == {"vllm": True, "node": True, "ray": True, "prometheus": True}
    assert (head["tok_s"], head["acceptance"], head["ttft_p50"], head["ttft_p95"]) == (59.94, 0.622, 0.7, None)
    assert head["ray_nodes"] == {"up": 1, "scraped": 2} and head["alerts"] == []
    assert worker["role"] == "worker" and worker["targets"] == {"node": True, "ray": False}
    assert worker["tok_s"] is None and worker["memory_used"] == 74e9 and worker["alerts"] == ["LagunaRayNodeDown"]
    lines = mon.table(rows)
    assert lines[0].split() == ["node", "role", "targets", "tok/s", "accept", "TTFT", "p50/p95", "KV", "running",
                                "Ray", "nodes", "mem", "used", "alerts"]
    assert "59.9" in lines[1] and "62%" in lines[1] and "0.70s/-" in lines[1] and "12%" in lines[1]
    assert "81.0 GB" in lines[1] and "1/2" in lines[1]
    assert "ray:DOWN" in lines[2] and lines[2].endswith("LagunaRayNodeDown")
    assert max(len(line) for line in lines) < 160


def test_only_firing_alerts_count_and_the_message_names_each_with_what_to_do():
    firing = mon.firing(FIRING)
    assert [(a["name"], a["node"], a["severity"]) for a in firing] == [("LagunaRayNodeDown", "spark-2", "critical")]
    message = mon.firing_message(firing, "http://127.0.0.1:9090")
    assert message == ("1 alert(s) fire at http://127.0.0.1:9090: LagunaRayNodeDown on spark-2: Ray's metrics at "
                       "192.168.100.2:6382 do not answer - Run verify.")
    assert mon.firing_message([], "u") == "No alert fires at u."


# --- monitoring_status against the API double --------------------------------------------------

def _api(alerts=(), **kwargs):
    queries = mon.status_queries("5m")
    vectors = dict((queries[key], samples) for key, samples in _results().items())
    return prometheus_api.Api(vectors, list(alerts), **kwargs)


def test_the_module_reads_the_table_and_the_alerts(prometheus, run_module):
    api = _api(FIRING, strict=True)
    url = prometheus(api)
    result = run_module(monitoring_status, {"url": url + "/", "nodes": ["spark-1", "spark-2"], "head": "spark-1"})
    assert not result.failed and not result["changed"]
    assert [row["node"] for row in result["rows"]] == ["spark-1", "spark-2"]
    assert result["rows"][0]["acceptance"] == 0.622 and result["rows"][0]["ttft_p95"] is None
    assert result["table"] == mon.table(result["rows"])
    assert [a["name"] for a in result["firing"]] == ["LagunaRayNodeDown"]
    assert sorted(api.seen) == sorted(mon.status_queries("5m").values())


def test_the_module_fails_on_a_firing_alert_only_when_asked(prometheus, run_module):
    url = prometheus(_api(FIRING))
    args = {"url": url, "nodes": ["spark-1", "spark-2"], "head": "spark-1", "fail_on_firing": True}
    result = run_module(monitoring_status, args)
    assert result.failed and "LagunaRayNodeDown on spark-2" in result["msg"] and "Run verify." in result["msg"]
    assert not run_module(monitoring_status, dict(args, url=prometheus(_api()))).failed


def test_the_module_says_what_to_check_when_prometheus_cannot_be_read(prometheus, run_module):
    args = {"nodes": ["spark-1"], "head": "spark-1", "timeout": 5}
    down = run_module(monitoring_status, dict(args, url="http://127.0.0.1:%d" % free_port()))
    assert down.failed and "Could not read Prometheus" in down["msg"] and "laguna_monitoring" in down["msg"]
    refused = run_module(monitoring_status, dict(args, url=prometheus(prometheus_api.Api(strict=True))))
    assert refused.failed and "parse error" in refused["msg"]
    broken = run_module(monitoring_status, dict(args, url=prometheus(prometheus_api.Api(status=503))))
    assert broken.failed and "503" in broken["msg"]
    assert "not a Prometheus duration" in run_module(monitoring_status, dict(args, url="http://x", window="5"))["msg"]


# --- monitoring_node_info ---------------------------------------------------------------------------

def _python(tmp_path, ok):
    path = tmp_path / ("python-ok" if ok else "python-minimal")
    body = "exit 0" if ok else ("echo 'Traceback (most recent call last):' >&2\n"
                                "echo \"ModuleNotFoundError: No module named 'aiohttp_cors'\" >&2\nexit 1")
    path.write_text('#!/bin/sh\n[ "$1" = -c ] && [ "$2" = "%s" ] || exit 9\n[ "$PYTHONDONTWRITEBYTECODE" = 1 ] || '
                    'exit 8\n%s\n' % (monitoring_probe.RAY_DEPS_CHECK, body))
    path.chmod(0o755)
    return str(path)


def test_node_info_reads_packages_the_record_the_mount_point_and_rays_agent(tmp_path, run_module):
    state = tmp_path / "state"
    state.mkdir()
    (state / "installed.json").write_text('["prometheus-node-exporter", "prometheus"]')
    args = {"packages": ["dpkg", "laguna-no-such-package"], "path": str(tmp_path / "models" / "not-yet"),
            "python": _python(tmp_path, True), "state_dir": str(state)}
    result = run_module(monitoring_node_info, args, check_mode=True)
    assert not result.failed and not result["changed"]
    assert result["missing"] == ["laguna-no-such-package"]
    assert result["recorded"] == ["prometheus", "prometheus-node-exporter"]
    assert result["mountpoint"] == monitoring_probe.mountpoint(str(tmp_path))
    assert os.path.ismount(result["mountpoint"])
    assert result["python_found"] and result["ray_metrics"] and result["ray_metrics_error"] == ""
    minimal = run_module(monitoring_node_info, dict(args, python=_python(tmp_path, False), state_dir=str(tmp_path)))
    assert not minimal["ray_metrics"] and minimal["recorded"] == []
    assert minimal["ray_metrics_error"] == "ModuleNotFoundError: No module named 'aiohttp_cors'"
    absent = run_module(monitoring_node_info, dict(args, python=str(tmp_path / "venv" / "bin" / "python")))
    assert not absent["python_found"] and not absent["ray_metrics"] and "does not exist" in absent["ray_metrics_error"]


def test_the_mount_point_of_a_path(tmp_path):
    assert monitoring_probe.mountpoint("/") == "/"
    assert monitoring_probe.mountpoint("/proc/self/no/such") == "/proc"


# --- scripts/dashboard_check.py against the API double -----------------------------------------------

def _dashboard_api(model, present):
    """The API double answering one sample for the queries of the panels named in ``present``."""
    variables = dict(mon.template_variables(model), roce_devices="eth0")
    vectors = {}
    for panel in mon.dashboard_queries(model):
        for query in panel["queries"]:
            expr = mon.expand(query["expr"], variables, "1m")
            vectors[expr] = [({"node": "spark-1"}, 1.0)] if panel["title"] in present else []
    return prometheus_api.Api(vectors, strict=True)


def test_dashboard_check_reports_each_panel_and_fails_on_an_expected_one_without_data(model, prometheus, capsys):
    titles = [p["title"] for p in mon.dashboard_queries(model)]
    url = prometheus(_dashboard_api(model, set(titles) - {"Ray nodes alive", "KV-cache usage"}))
    argv = [url, "--rate-interval", "1m", "--var", "roce_devices=eth0", "--expect-all",
            "--skip", "Ray nodes alive=no ray[default] in the test venv"]
    assert dashboard_check.main(argv) == 1
    out = capsys.readouterr().out
    assert "Ray nodes alive" in out and "(not expected: no ray[default] in the test venv)" in out
    assert "1 expected panel(s) without data: KV-cache usage" in out
    assert dashboard_check.main(argv + ["--skip", "7=no KV figures"]) == 0
    assert dashboard_check.main([url, "--rate-interval", "1m", "--var", "roce_devices=eth0",
                                 "--expect", "Generated tokens/s"]) == 0
    capsys.readouterr()
    assert dashboard_check.main([url, "--rate-interval", "1m", "--var", "roce_devices=eth0", "--json",
                                 "--expect", "KV-cache usage"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["missing"] == ["KV-cache usage"] and len(report["panels"]) == len(titles)


def test_dashboard_check_without_prometheus_exits_2(capsys):
    assert dashboard_check.main(["http://127.0.0.1:%d" % free_port(), "--timeout", "2"]) == 2
    assert "cannot reach Prometheus" in capsys.readouterr().err
