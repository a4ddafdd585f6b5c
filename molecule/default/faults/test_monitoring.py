"""Monitoring on the converged cluster (molecule side effect, before the intruder and the faults).

The real Prometheus (Debian's package, in the head container) scrapes the stand-in vLLM, the real
Ray raylets' metrics agents and the real node exporters of both nodes. The tests read it from the
head, where it listens (loopback, the default): every target up, the daemons listening only where
asked, status.yml's table, every panel of the shipped dashboard with data, and the acceptance alert
firing while the stand-in's acceptance is 0 under a bounded load, named by verify.yml, and clearing
after the acceptance is restored. The first test also writes what monitoring costs on a node
(.cache/measurements/monitoring-cost.json, the README's Monitoring section).
"""

import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "scripts"))
sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position
from helpers import constants as c  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
INVENTORY = os.path.join(EPHEMERAL, "inventory")
MEASUREMENTS = os.path.join(ROOT, ".cache", "measurements")
HEAD, WORKER = c.MOLECULE_HEAD, c.MOLECULE_WORKER
ROCE_IP = c.MOLECULE_ROCE_IP
PROMETHEUS = "http://127.0.0.1:9090"
# The stand-in reads its acceptance from this file while it exists (molecule.yml's vllm_serve_environment).
ACCEPTANCE_FILE = "/etc/laguna-standin/acceptance"
ALERT = "LagunaSpecDecodeAcceptanceLow"
# Where the dashboard check runs: a copy of what scripts/dashboard_check.py reads, on the head.
CHECK_DIR = "/tmp/laguna-dashboard-check"


def podman(host, *cmd, check=True, timeout=60):
    proc = subprocess.run(["podman", "exec", host] + list(cmd), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s on %s: rc=%d %s %s" % (cmd, host, proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout.strip()


def prometheus(path, **params):
    """GET a path of the head's Prometheus HTTP API (from the head), its `data`."""
    script = ("import json, sys, urllib.parse, urllib.request\n"
              "url = sys.argv[1] + '?' + urllib.parse.urlencode(json.loads(sys.argv[2]))\n"
              "print(urllib.request.urlopen(url, timeout=20).read().decode())\n")
    body = json.loads(podman(HEAD, "python3", "-c", script, PROMETHEUS + path, json.dumps(params)))
    assert body["status"] == "success", body
    return body["data"]


def query(expr):
    return prometheus("/api/v1/query", query=expr)["result"]


def alert_states(name):
    return sorted({a["state"] for a in prometheus("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name})


def play(playbook, *args, timeout=600):
    rc, changed, out, seconds = noop_ratio.play(INVENTORY, playbook, *args, timeout=timeout)
    return rc, changed, " ".join(out.split()), seconds


def listening(host, port):
    """The local addresses a TCP socket listens on at ``port`` in ``host`` (ss, iproute2)."""
    out = podman(host, "ss", "-H", "-ltn", "sport = :%d" % port)
    return sorted({line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()})


def wait_for(what, probe, timeout, interval=5):
    """Poll ``probe`` until it returns a true value or ``timeout`` seconds pass; (value, seconds)."""
    start = time.monotonic()
    while True:
        value = probe()
        if value or time.monotonic() - start > timeout:
            assert value, "%s: not within %d s" % (what, timeout)
            return value, round(time.monotonic() - start, 1)
        time.sleep(interval)


@pytest.fixture(scope="module")
def load():
    """Requests one after another from the head (with the API key) while the tests that need traffic
    run: bounded by a deadline of 360 s, and stopped when the module's tests end."""
    script = ("import json, time, urllib.request\n"
              "end = time.monotonic() + 360\n"
              "while time.monotonic() < end:\n"
              "    req = urllib.request.Request('http://127.0.0.1:%d/v1/completions', data=json.dumps({'model': '%s',"
              " 'prompt': 'def f():', 'max_tokens': 32}).encode(), headers={'Content-Type': 'application/json',"
              " 'Authorization': 'Bearer %s'})\n"
              "    urllib.request.urlopen(req, timeout=30).read()\n" % (c.API_PORT, c.SERVED_MODEL, c.MOLECULE_API_KEY))
    loader = subprocess.Popen(["podman", "exec", HEAD, "python3", "-c", script], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    # Traffic in two scrapes (5 s apart) at least, so that rates and percentiles have data.
    wait_for("generated tokens", lambda: query('sum(rate(vllm:generation_tokens_total{job="vllm"}[1m])) > 0'),
             timeout=60)
    yield loader
    podman(HEAD, "pkill", "-f", "[w]hile time.monotonic", check=False)
    loader.wait(timeout=60)


@pytest.fixture(scope="module")
def targets():
    """Every target with its health, once all answered a scrape (the benchmark ran before)."""
    def up():
        active = prometheus("/api/v1/targets", state="active")["activeTargets"]
        return active if active and all(t["health"] == "up" for t in active) else None
    active = wait_for("every target up", up, timeout=60)[0]
    return sorted((t["labels"]["job"], t["labels"].get("node", t["labels"]["instance"])) for t in active)


def test_prometheus_scrapes_vllm_every_raylet_and_every_node_exporter(targets):
    assert targets == sorted([("vllm", HEAD), ("ray", HEAD), ("ray", WORKER), ("node", HEAD), ("node", WORKER),
                              ("prometheus", HEAD)]), targets
    # The real Ray agents export Ray's own series, and both raylets count as alive.
    assert query('count(count by (node) (ray_node_mem_used{job="ray"}))')[0]["value"][1] == "2"
    # What monitoring costs on the head, at this scenario's scrape interval (5 s, three times the
    # default's work): Prometheus's and a node exporter's RSS and CPU, for the README.
    cost = {}
    for job in ("prometheus", "node"):
        rss = query('max(process_resident_memory_bytes{job="%s"})' % job)
        cpu = query('max(rate(process_cpu_seconds_total{job="%s"}[1m]))' % job)
        cost[job] = {"rss_mb": round(float(rss[0]["value"][1]) / 1e6, 1),
                     "cpu_cores": round(float(cpu[0]["value"][1]), 4)}
    cost["series"] = int(float(query("prometheus_tsdb_head_series")[0]["value"][1]))
    cost["scrape_interval_s"] = 5
    cost["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.makedirs(MEASUREMENTS, exist_ok=True)
    with open(os.path.join(MEASUREMENTS, "monitoring-cost.json"), "w") as handle:
        json.dump(cost, handle, indent=2)
    print("MONITORING-COST", json.dumps(cost))
    assert cost["prometheus"]["rss_mb"] > 0 and cost["node"]["rss_mb"] > 0


def test_the_daemons_listen_only_where_asked():
    # The node exporter: loopback and the node's RoCE address; Prometheus: the head's loopback.
    for host in (HEAD, WORKER):
        assert listening(host, 9100) == sorted(["127.0.0.1", ROCE_IP[host]]), host
    assert listening(HEAD, 9090) == ["127.0.0.1"]
    assert listening(WORKER, 9090) == []


def test_status_prints_the_cluster_from_prometheus():
    rc, _changed, out, _seconds = play("laguna.spark.status")
    assert rc == 0, out[-3000:]
    for word in (HEAD, WORKER, "tok/s", "Ray nodes", "vllm:up", "ray:up", "node:up", "No alert fires at"):
        assert word in out, (word, out[-3000:])
    assert "DOWN" not in out and "none scraped" not in out, out[-3000:]


def test_every_dashboard_panel_has_data(load):
    # What scripts/dashboard_check.py reads from the checkout: checkout.py finds the checkout's root and
    # loads monitoring.py from plugins/module_utils (no collection installed on the head).
    files = {"scripts/dashboard_check.py": "scripts/dashboard_check.py",
             "scripts/checkout.py": "scripts/checkout.py",
             "plugins/module_utils/monitoring.py": "plugins/module_utils/monitoring.py",
             "roles/monitoring/files/laguna-spark-dashboard.json": "roles/monitoring/files/laguna-spark-dashboard.json"}
    for src, dest in files.items():
        podman(HEAD, "mkdir", "-p", os.path.dirname(os.path.join(CHECK_DIR, dest)))
        subprocess.run(["podman", "cp", os.path.join(ROOT, src), "%s:%s" % (HEAD, os.path.join(CHECK_DIR, dest))],
                       check=True, capture_output=True, timeout=60)
    proc = subprocess.run(["podman", "exec", HEAD, "python3", os.path.join(CHECK_DIR, "scripts/dashboard_check.py"),
                           PROMETHEUS, "--var", "roce_devices=eth0", "--rate-interval", "1m", "--expect-all", "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["missing"] == [] and len(result["panels"]) == 11, result
    assert all(p["data"] and p["expected"] for p in result["panels"]), result


def test_zero_acceptance_under_load_fires_the_alert_verify_names_it_and_it_clears(load):
    assert loader_running(load) and alert_states(ALERT) == []
    podman(HEAD, "bash", "-c", "echo 0 > %s" % ACCEPTANCE_FILE)
    try:
        _states, fired_after = wait_for(ALERT + " firing", lambda: "firing" in alert_states(ALERT), timeout=150)
        print("MONITORING-ALERT fired after %.0f s" % fired_after)
        rc, _changed, out, _seconds = play("laguna.spark.verify")
        assert rc != 0 and ALERT in out, out[-3000:]
    finally:
        podman(HEAD, "rm", "-f", ACCEPTANCE_FILE, check=False)
    assert loader_running(load)
    _states, cleared_after = wait_for(ALERT + " cleared", lambda: alert_states(ALERT) == [], timeout=150)
    print("MONITORING-ALERT cleared after %.0f s" % cleared_after)


def loader_running(loader):
    assert loader.poll() is None, "the load ended early: %s" % loader.stderr.read()[-2000:]
    return True
