"""The monitoring role's files and readers against the real Prometheus and node exporter.

The distribution's prometheus 2.42 and prometheus-node-exporter 1.5
(scripts/promtool.sh fetches the packages and unpacks them; nothing is
installed) run here on 127.0.0.1 with the arguments, prometheus.yml and
alert rules the role renders (monitoring_render's functions; the rules with
molecule's shortened window and `for`), scraping a stand-in vLLM served in
this process while a thread sends it requests, and the node exporter.
Checked: every target answers; the monitoring_status module, run by
Ansible, reads the table (acceptance as the stand-in accepts) and no alert
of vLLM's; every panel of the dashboard has data but Ray's (no Ray here);
setting the stand-in's acceptance to 0 (LAGUNA_STANDIN_ACCEPTANCE_FILE)
while requests flow fires LagunaSpecDecodeAcceptanceLow, and restoring it
clears it. This is the molecule test of the monitoring role in small.
"""

import getpass
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml

from ansible.module_utils.urls import open_url
from ansible_collections.laguna.spark.plugins.module_utils import monitoring as mon
from helpers import ROOT, free_port, standin
from helpers.collection import collections_path
from helpers import monitoring as helper
from helpers.constants import SERVED_MODEL
from helpers.servers import Servers

ACCEPTANCE_ALERT = "LagunaSpecDecodeAcceptanceLow"
# Molecule's shortened durations (see docs/testing.md): rates over 5 s, 2 s of `for`.
FAST = {"monitoring_alert_window": "5s", "monitoring_alert_acceptance_for": "2s", "monitoring_alert_stall_for": "2s",
        "monitoring_alert_target_for": "2s", "monitoring_alert_roce_for": "2s", "monitoring_alert_ttft_for": "2s"}


def _tool(flag):
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "promtool.sh")] + ([flag] if flag else []),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _up_device():
    """A network device of this machine whose operstate is up (for the RoCE panel and rules), and its MTU."""
    for name in sorted(os.listdir("/sys/class/net")):
        base = os.path.join("/sys/class/net", name)
        try:
            with open(os.path.join(base, "operstate")) as state, open(os.path.join(base, "mtu")) as mtu:
                if state.read().strip() == "up":
                    return name, int(mtu.read())
        except OSError:
            continue
    return "lo", 65536


def _wait(what, predicate, timeout, interval=0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %s s" % (what, timeout))
        time.sleep(interval)


def _alerts(url, name):
    return [a for a in mon.alerts(url, 5, open_url) if a["labels"].get("alertname") == name]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    base = tmp_path_factory.mktemp("monitoring")
    acceptance = base / "acceptance"
    device, mtu = _up_device()
    names = ("LAGUNA_STANDIN_ACCEPTANCE", "LAGUNA_STANDIN_TOKENS_PER_S", "LAGUNA_STANDIN_ACCEPTANCE_FILE")
    saved = dict((name, os.environ.get(name)) for name in names)
    os.environ.update(LAGUNA_STANDIN_ACCEPTANCE="0.75", LAGUNA_STANDIN_TOKENS_PER_S="2000",
                      LAGUNA_STANDIN_ACCEPTANCE_FILE=str(acceptance))
    procs, servers, stop = [], Servers(), threading.Event()
    try:
        cli, = standin.modules("vllm.entrypoints.cli")
        engine = standin.engine(SERVED_MODEL)
        vllm_target = servers.start(cli.handler_for(engine)).split("//", 1)[1]

        exporter_port = free_port()
        exporter_args = mon.node_exporter_args({"listen_addresses": ["127.0.0.1"], "port": exporter_port, "extra_args": [
            # what molecule sets: the containers' root file system is an overlay, which 1.5 leaves out by default
            "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|"
            "devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|"
            "squashfs|sysfs|tracefs)$"]})
        procs.append(subprocess.Popen([_tool("--node-exporter")] + exporter_args, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))

        port = free_port()
        rules = base / "rules.yml"
        rules.write_text(helper.render_rules(dict(FAST, monitoring_roce_mtu=mtu, monitoring_roce_min_twins=1),
                                             netdevs=[device]))
        config = base / "prometheus.yml"
        config.write_text(yaml.safe_dump(mon.prometheus_config({
            "scrape_interval": "1s", "evaluation_interval": "1s", "rules_file": str(rules), "head": "spark-1",
            "nodes": [{"name": "spark-1", "roce_ip": "127.0.0.1", "listen_addresses": ["127.0.0.1"]}],
            "node_exporter_port": exporter_port, "ray": False, "ray_metrics_port": 6382, "vllm_target": vllm_target,
            "prometheus_target": "127.0.0.1:%d" % port}), sort_keys=False))
        args = mon.prometheus_args({"listen_address": "127.0.0.1", "port": port, "config_file": str(config),
                                    "retention_time": "1d", "retention_size": "",
                                    "extra_args": ["--storage.tsdb.path=%s" % (base / "data")]})
        log = open(base / "prometheus.log", "w")
        procs.append(subprocess.Popen([_tool("--prometheus")] + args, stdout=log, stderr=log))
        url = "http://127.0.0.1:%d" % port

        def ready():
            try:
                return urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200
            except OSError:
                return False

        _wait("Prometheus ready (%s)" % (base / "prometheus.log"), ready, 30)

        def load():
            body = json.dumps({"model": SERVED_MODEL, "prompt": "def merge(a, b):", "max_tokens": 60}).encode()
            while not stop.is_set():
                request = urllib.request.Request("http://%s/v1/completions" % vllm_target, data=body,
                                                 headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(request, timeout=10).read()
                except OSError:
                    time.sleep(0.1)

        threading.Thread(target=load, daemon=True).start()
        yield {"url": url, "device": device, "acceptance": acceptance, "engine": engine}
    finally:
        stop.set()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        servers.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_target_answers(stack):
    def all_up():
        up = mon.query(stack["url"], "up", 5, open_url)
        jobs = dict((labels["job"], value) for labels, value in up)
        return jobs if jobs == {"vllm": 1.0, "node": 1.0, "prometheus": 1.0} else None

    _wait("vllm, node and prometheus up", all_up, 20)
    # every target carries its node
    assert {labels["node"] for labels, _value in mon.query(stack["url"], "up", 5, open_url)} == {"spark-1"}


def test_the_status_module_reads_the_table_through_ansible(stack, runner):
    _wait("a generated token rate", lambda: mon.query(
        stack["url"], mon.status_queries("5s")["tok_s"], 5, open_url), 20)
    out = stack["acceptance"].parent / "status.json"

    def status_with_every_target_up():
        # Scrapes every 1 s time out at 1 s: on a loaded machine the node
        # exporter's can miss one (up 0) or come after vLLM's first; the module
        # reports what Prometheus holds at that moment, so ask again (bounded).
        result = runner.run(
            "    - laguna.spark.monitoring_status:\n        url: %s\n        window: 5s\n        nodes: [spark-1]\n"
            "        head: spark-1\n      register: status\n"
            "    - ansible.builtin.copy:\n        content: '{{ status | to_json }}'\n        dest: %s\n"
            "        mode: '0644'\n" % (stack["url"], out))
        assert result.status == "successful", result.text
        status = json.loads(out.read_text())
        row = status["rows"][0]
        return status if all(row["targets"].values()) and row["memory_used"] is not None else None

    status = _wait("a status row with every target up", status_with_every_target_up, 60, interval=2)
    row = status["rows"][0]
    assert row["node"] == "spark-1" and row["role"] == "head"
    assert row["targets"] == {"vllm": True, "node": True, "prometheus": True}
    # 0.75 of k=6 is round(4.5) = 4 accepted per draft
    assert abs(row["acceptance"] - 4 / 6.0) < 0.02, row
    assert row["tok_s"] > 100 and row["ttft_p95"] is not None and row["memory_used"] > 0
    assert status["table"][1].startswith("spark-1")
    assert not [a for a in status["firing"] if a["name"] in (ACCEPTANCE_ALERT, "LagunaVllmDown")]


def _status_playbook(tmp_path, port):
    """playbooks/status.yml on this machine as the head (monitoring on, Prometheus at ``port``)."""
    (tmp_path / "hosts").write_text("[spark_head]\nspark-1 ansible_connection=local laguna_roce_ip=127.0.0.1 "
                                    "ansible_python_interpreter=%s\n[spark_workers]\n" % sys.executable)
    extra = {"laguna_user": getpass.getuser(), "laguna_monitoring": True, "laguna_fast_noop": False,
             "monitoring_prometheus_port": port, "monitoring_alert_window": "5s"}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts"), "playbooks/status.yml", "-e", json.dumps(extra)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_status_playbook_prints_the_table_or_says_why_it_cannot(stack, tmp_path):
    port = int(stack["url"].rsplit(":", 1)[1])
    proc = _status_playbook(tmp_path, port)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    text = proc.stdout
    assert "node     role  targets" in text and "spark-1  head  node:up prometheus:up vllm:up" in text, text[-3000:]
    assert "alert(s) fire at" in text or "No alert fires at" in text
    down = _status_playbook(tmp_path, free_port())
    assert down.returncode != 0 and "Could not read Prometheus at http://127.0.0.1:" in down.stdout, down.stdout[-3000:]


def test_every_panel_but_rays_has_data(stack):
    with open(helper.DASHBOARD) as handle:
        model = json.load(handle)
    spec = importlib.util.spec_from_file_location("dashboard_check", os.path.join(ROOT, "scripts", "dashboard_check.py"))
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)

    def panels():
        rows = check.check(stack["url"], model, "5s", {"roce_devices": stack["device"]}, expect_all=True,
                           skipped={"Ray nodes alive": "no Ray here"})
        return rows if not [r for r in rows if r["expected"] and not r["data"]] else None

    rows = _wait("data in every panel", panels, 20, interval=1)
    for row in rows:
        assert not [q["error"] for q in row["queries"] if q["error"]], row
    ray = [r for r in rows if r["title"] == "Ray nodes alive"][0]
    assert not ray["data"] and not ray["expected"]


def test_acceptance_at_zero_fires_the_alert_and_restoring_it_clears_it(stack):
    url = stack["url"]
    assert not [a for a in _alerts(url, ACCEPTANCE_ALERT) if a["state"] == "firing"]
    stack["acceptance"].write_text("0\n")
    try:
        firing = _wait("%s firing" % ACCEPTANCE_ALERT,
                       lambda: [a for a in _alerts(url, ACCEPTANCE_ALERT) if a["state"] == "firing"], 30)
        assert firing[0]["labels"]["node"] == "spark-1" and firing[0]["labels"]["model_name"] == SERVED_MODEL
        # The summary names the windowed acceptance when the alert was last evaluated: below the
        # threshold, not yet 0 while the window still holds accepted tokens from before.
        summary = re.match(r"Spec-decode acceptance is ([0-9.]+)% while requests are served \(alert below 30%;",
                           firing[0]["annotations"]["summary"])
        assert summary and float(summary.group(1)) < 30, firing[0]["annotations"]
    finally:
        stack["acceptance"].unlink()
    _wait("%s cleared" % ACCEPTANCE_ALERT, lambda: not _alerts(url, ACCEPTANCE_ALERT), 30)
