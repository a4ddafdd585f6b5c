"""The monitoring role's alert rules under `promtool test rules`.

The rules are rendered from the role's template with the role's defaults
(tests/helpers/monitoring.py) and evaluated by the distribution's promtool
(scripts/promtool.sh; no promtool, no test: it fails) over recorded series:
each alert fires where it should, with its labels and its annotations as
Prometheus expands them, and stays silent in the negative cases (healthy
values, no requests, other devices and mount points, a condition shorter
than its `for`). One case renders the shortened `for` durations and window
molecule uses, and one proves that a wrong expectation fails.
"""

import os
import subprocess

import pytest
import yaml

from helpers import monitoring as mon

SERVED = "laguna-s-2.1"
VLLM = 'job="vllm",instance="127.0.0.1:8000",node="spark-1",engine="0",model_name="%s"' % SERVED
HEAD_NODE = 'job="node",instance="192.168.100.1:9100",node="spark-1"'
WORKER_NODE = 'job="node",instance="192.168.100.2:9100",node="spark-2"'
TWIN1, TWIN2 = mon.TWINS


@pytest.fixture(scope="module")
def promtool():
    return mon.promtool()


def actions(rules_text):
    """{alert name: its `action` annotation} of the rendered rules."""
    doc = yaml.safe_load(rules_text)
    return dict((r["alert"], r["annotations"]["action"]) for g in doc["groups"] for r in g["rules"])


def run(promtool, tmp_path, tests, values=None, evaluation_interval="1m"):
    """promtool test rules over ``tests``: (return code, output)."""
    rules = mon.render_rules(values)
    (tmp_path / "rules.yml").write_text(rules)
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": evaluation_interval, "tests": tests}, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def passes(promtool, tmp_path, tests, values=None, evaluation_interval="1m"):
    code, out = run(promtool, tmp_path, tests, values, evaluation_interval)
    assert code == 0, out
    assert "SUCCESS" in out, out


def alert(name, labels, summary, action, severity="warning"):
    return {"exp_labels": dict(labels, severity=severity),
            "exp_annotations": {"summary": summary, "action": action}}


def check(name, eval_time, expected):
    return {"eval_time": eval_time, "alertname": name, "exp_alerts": expected}


def spec_series(drafted_per_min, accepted_per_min, minutes=40):
    return [{"series": "vllm:spec_decode_num_draft_tokens_total{%s}" % VLLM,
             "values": "0+%dx%d" % (drafted_per_min, minutes)},
            {"series": "vllm:spec_decode_num_accepted_tokens_total{%s}" % VLLM,
             "values": "0+%dx%d" % (accepted_per_min, minutes)}]


RULES = mon.render_rules()
ACTION = actions(RULES)
ACCEPTANCE = "LagunaSpecDecodeAcceptanceLow"


def acceptance_fired(percent, action=None):
    """The acceptance alert as it fires at ``percent`` acceptance; ``action``: of other rules than RULES."""
    return alert(ACCEPTANCE, {"node": "spark-1", "model_name": SERVED},
                 "Spec-decode acceptance is %d%% while requests are served (alert below 30%%; the recipe: 62%% on "
                 "code at k=6)." % percent, action or ACTION[ACCEPTANCE])


def test_acceptance_low_while_drafting_fires_after_its_for(promtool, tmp_path):
    name = ACCEPTANCE
    fired = acceptance_fired(10)
    passes(promtool, tmp_path, [{
        "interval": "1m", "input_series": spec_series(600, 60),
        # below the threshold from the first rate; pending for the 10m `for`, firing after
        "alert_rule_test": [check(name, "9m", []), check(name, "12m", [fired]), check(name, "30m", [fired])],
    }])


def test_acceptance_healthy_idle_or_brief_stays_silent(promtool, tmp_path):
    name = ACCEPTANCE
    passes(promtool, tmp_path, [
        # the recipe's 62.2% (373 of 600 draft tokens a minute)
        {"interval": "1m", "input_series": spec_series(600, 373), "alert_rule_test": [check(name, "30m", [])]},
        # no requests: no drafts, the ratio has no value
        {"interval": "1m", "input_series": spec_series(0, 0), "alert_rule_test": [check(name, "30m", [])]},
        # 0% for 8 minutes only, healthy before and after
        {"interval": "1m", "input_series": [
            {"series": "vllm:spec_decode_num_draft_tokens_total{%s}" % VLLM, "values": "0+600x40"},
            {"series": "vllm:spec_decode_num_accepted_tokens_total{%s}" % VLLM,
             "values": "0+400x10 4000x8 4000+400x22"}],
         "alert_rule_test": [check(name, "18m", []), check(name, "22m", []), check(name, "35m", [])]},
    ])


def test_acceptance_clears_after_recovery(promtool, tmp_path):
    name = ACCEPTANCE
    fired = acceptance_fired(0)
    passes(promtool, tmp_path, [{
        "interval": "1m", "input_series": [
            {"series": "vllm:spec_decode_num_draft_tokens_total{%s}" % VLLM, "values": "0+600x60"},
            # 0 accepted for 25 minutes, then healthy again
            {"series": "vllm:spec_decode_num_accepted_tokens_total{%s}" % VLLM, "values": "0x25 0+400x35"}],
        "alert_rule_test": [check(name, "20m", [fired]), check(name, "40m", [])],
    }])


def test_shortened_durations_fire_within_a_minute(promtool, tmp_path):
    """What molecule sets (a 30s window, 20s `for`): the alert fires a minute after acceptance drops to 0."""
    name = ACCEPTANCE
    values = {"monitoring_alert_window": "30s", "monitoring_alert_acceptance_for": "20s"}
    rules = mon.render_rules(values)
    assert "[30s]" in rules and "for: 20s" in rules and "[5m]" not in rules
    fired = acceptance_fired(0, actions(rules)[name])
    passes(promtool, tmp_path, [{
        "interval": "10s", "input_series": [
            {"series": "vllm:spec_decode_num_draft_tokens_total{%s}" % VLLM, "values": "0+100x60"},
            # healthy for 2 minutes, then 0
            {"series": "vllm:spec_decode_num_accepted_tokens_total{%s}" % VLLM, "values": "0+70x12 840x48"}],
        "alert_rule_test": [check(name, "2m", []), check(name, "3m10s", [fired])],
    }], values, evaluation_interval="10s")


def test_a_hung_server_fires_and_a_busy_or_idle_one_does_not(promtool, tmp_path):
    name = "LagunaDecodeStalled"
    fired = alert(name, {"node": "spark-1", "model_name": SERVED},
                  "2 request(s) running and no token generated for 2m: the server is hung.", ACTION[name],
                  severity="critical")
    running = "vllm:num_requests_running{%s}" % VLLM
    tokens = "vllm:generation_tokens_total{%s}" % VLLM
    passes(promtool, tmp_path, [
        {"interval": "1m", "input_series": [{"series": running, "values": "2x20"},
                                            {"series": tokens, "values": "0+500x5 2500x15"}],
         # flat from 5m: increase over 5m is 0 from 10m, firing 2m later
         "alert_rule_test": [check(name, "9m", []), check(name, "13m", [fired])]},
        {"interval": "1m", "input_series": [{"series": running, "values": "2x20"},
                                            {"series": tokens, "values": "0+500x20"}],
         "alert_rule_test": [check(name, "15m", [])]},
        {"interval": "1m", "input_series": [{"series": running, "values": "0x20"},
                                            {"series": tokens, "values": "100x20"}],
         "alert_rule_test": [check(name, "15m", [])]},
    ])


@pytest.mark.parametrize("job,name,severity,summary", [
    ("vllm", "LagunaVllmDown", "critical", "vLLM's /metrics at {instance} does not answer."),
    ("ray", "LagunaRayNodeDown", "critical",
     "Ray's metrics at {instance} do not answer: the node's raylet is gone or has left the cluster."),
    ("node", "LagunaNodeExporterDown", "warning",
     "The node exporter at {instance} does not answer: the RoCE, disk and memory alerts of the node are blind."),
])
def test_a_target_down_fires_for_its_node_only(promtool, tmp_path, job, name, severity, summary):
    port = {"vllm": 8000, "ray": 6382, "node": 9100}[job]
    down = {"job": job, "instance": "192.168.100.2:%d" % port, "node": "spark-2"}
    up = {"job": job, "instance": "192.168.100.1:%d" % port, "node": "spark-1"}

    def series(labels, values):
        return {"series": "up{%s}" % ",".join('%s="%s"' % kv for kv in sorted(labels.items())), "values": values}

    fired = alert(name, down, summary.format(instance=down["instance"]), ACTION[name], severity=severity)
    passes(promtool, tmp_path, [
        {"interval": "1m", "input_series": [series(up, "1x10"), series(down, "1x2 0x8")],
         "alert_rule_test": [check(name, "3m", []), check(name, "6m", [fired])]},
        # a scrape that failed once is no alert
        {"interval": "1m", "input_series": [series(up, "1x10"), series(down, "1 0 1 1 0 1 1 1 1 1")],
         "alert_rule_test": [check(name, "6m", [])]},
    ])


def test_a_twin_at_the_wrong_mtu_fires_and_other_devices_do_not(promtool, tmp_path):
    name = "LagunaRoceTwinMtu"
    labels = dict(job="node", instance="192.168.100.2:9100", node="spark-2", device=TWIN2)
    fired = alert(name, labels, "RoCE twin %s has MTU 1500, not 9000." % TWIN2, ACTION[name])
    passes(promtool, tmp_path, [{"interval": "1m", "input_series": [
        {"series": 'node_network_mtu_bytes{%s,device="%s"}' % (HEAD_NODE, TWIN1), "values": "9000x10"},
        {"series": 'node_network_mtu_bytes{%s,device="%s"}' % (HEAD_NODE, TWIN2), "values": "9000x10"},
        {"series": 'node_network_mtu_bytes{%s,device="%s"}' % (WORKER_NODE, TWIN1), "values": "9000x10"},
        {"series": 'node_network_mtu_bytes{%s,device="%s"}' % (WORKER_NODE, TWIN2), "values": "1500x10"},
        # the management port and a lookalike name are not twins
        {"series": 'node_network_mtu_bytes{%s,device="eth0"}' % WORKER_NODE, "values": "1500x10"},
        {"series": 'node_network_mtu_bytes{%s,device="%sx"}' % (WORKER_NODE, TWIN2), "values": "1500x10"}],
        "alert_rule_test": [check(name, "5m", [fired])]}])


def test_a_twin_without_link_fires(promtool, tmp_path):
    name = "LagunaRoceTwinDown"
    labels = dict(job="node", instance="192.168.100.1:9100", node="spark-1", device=TWIN1)
    fired = alert(name, labels, "RoCE twin %s has no link (operstate not up)." % TWIN1,
                  ACTION[name].replace("{{ $labels.device }}", TWIN1), severity="critical")
    passes(promtool, tmp_path, [{"interval": "1m", "input_series": [
        {"series": 'node_network_up{%s,device="%s"}' % (HEAD_NODE, TWIN1), "values": "1 1 0x8"},
        {"series": 'node_network_up{%s,device="%s"}' % (HEAD_NODE, TWIN2), "values": "1x10"},
        {"series": 'node_network_up{%s,device="wlan0"}' % HEAD_NODE, "values": "0x10"}],
        "alert_rule_test": [check(name, "2m", []), check(name, "6m", [fired])]}])


def test_a_node_showing_fewer_twins_than_expected_fires(promtool, tmp_path):
    name = "LagunaRoceTwinMissing"
    twins = ", ".join(sorted(mon.TWINS))
    one = alert(name, {"node": "spark-2"}, "The node shows 1 of the RoCE twins %s (2 expected)." % twins, ACTION[name])
    passes(promtool, tmp_path, [
        # the worker's second twin was renamed; the head shows both
        {"interval": "1m", "input_series": [
            {"series": "up{%s}" % HEAD_NODE, "values": "1x10"}, {"series": "up{%s}" % WORKER_NODE, "values": "1x10"},
            {"series": 'node_network_up{%s,device="%s"}' % (HEAD_NODE, TWIN1), "values": "1x10"},
            {"series": 'node_network_up{%s,device="%s"}' % (HEAD_NODE, TWIN2), "values": "1x10"},
            {"series": 'node_network_up{%s,device="%s"}' % (WORKER_NODE, TWIN1), "values": "1x10"},
            {"series": 'node_network_up{%s,device="enp1s0f1np1r"}' % WORKER_NODE, "values": "1x10"}],
         "alert_rule_test": [check(name, "5m", [one])]},
        # no twin at all (wrong names): 0 of them; a node whose exporter is down is LagunaNodeExporterDown's
        {"interval": "1m", "input_series": [
            {"series": "up{%s}" % HEAD_NODE, "values": "1x10"}, {"series": "up{%s}" % WORKER_NODE, "values": "0x10"},
            {"series": 'node_network_up{%s,device="eth0"}' % HEAD_NODE, "values": "1x10"}],
         "alert_rule_test": [check(name, "5m", [alert(
             name, {"node": "spark-1"}, "The node shows 0 of the RoCE twins %s (2 expected)." % twins,
             ACTION[name])])]},
    ])


def test_the_models_disk_nearly_full_fires_and_other_mounts_do_not(promtool, tmp_path):
    name = "LagunaModelDiskNearlyFull"
    root = dict(job="node", instance="192.168.100.1:9100", node="spark-1", mountpoint="/", device="/dev/nvme0n1p2",
                fstype="ext4")
    fired = alert(name, root, "/, which holds the models, has 9.313GiB free (alert below 20 GB).", ACTION[name])
    passes(promtool, tmp_path, [
        {"interval": "1m", "input_series": [
            {"series": 'node_filesystem_avail_bytes{%s,mountpoint="/",device="/dev/nvme0n1p2",fstype="ext4"}'
                       % HEAD_NODE, "values": "10000000000x10"},
            {"series": 'node_filesystem_avail_bytes{%s,mountpoint="/boot/efi",device="/dev/nvme0n1p1",fstype="vfat"}'
                       % HEAD_NODE, "values": "100000000x10"}],
         "alert_rule_test": [check(name, "3m", []), check(name, "7m", [fired])]},
        {"interval": "1m", "input_series": [
            {"series": 'node_filesystem_avail_bytes{%s,mountpoint="/",device="/dev/nvme0n1p2",fstype="ext4"}'
                       % HEAD_NODE, "values": "500000000000x10"}],
         "alert_rule_test": [check(name, "7m", [])]},
    ])


def ttft_series(bucket_of_all):
    """TTFT histogram samples with every request (1 a minute) in the bucket ending at ``bucket_of_all``."""
    out = []
    for le in ("0.5", "0.75", "1.0", "20.0", "40.0", "+Inf"):
        grows = le == "+Inf" or float(le) >= float(bucket_of_all)
        out.append({"series": 'vllm:time_to_first_token_seconds_bucket{%s,le="%s"}' % (VLLM, le),
                    "values": "0+1x30" if grows else "0x30"})
    return out


def test_ttft_p95_above_its_threshold_fires(promtool, tmp_path):
    name = "LagunaTtftHigh"
    fired = alert(name, {"node": "spark-1", "model_name": SERVED},
                  "Time to first token, 95th percentile, is 39s (alert above 30 s).", ACTION[name])
    passes(promtool, tmp_path, [
        # every prompt takes 20-40 s: p95 interpolates to 39 s
        {"interval": "1m", "input_series": ttft_series("40.0"),
         "alert_rule_test": [check(name, "9m", []), check(name, "20m", [fired])]},
        # the recipe's 0.7 s at 2K
        {"interval": "1m", "input_series": ttft_series("0.75"), "alert_rule_test": [check(name, "20m", [])]},
    ])
    code, out = run(promtool, tmp_path, [{"interval": "1m", "input_series": [
        dict(s, values="0x30") for s in ttft_series("40.0")], "alert_rule_test": [check(name, "20m", [])]}])
    assert code == 0, "no requests: no quantile, no alert\n" + out


def test_a_wrong_expectation_fails(promtool, tmp_path):
    """The harness can fail: promtool reports an alert that fires where none was expected."""
    name = ACCEPTANCE
    code, out = run(promtool, tmp_path, [{"interval": "1m", "input_series": spec_series(600, 60),
                                          "alert_rule_test": [check(name, "30m", [])]}])
    assert code != 0 and name in out, out


def test_every_rule_is_tested_here():
    with open(os.path.abspath(__file__)) as handle:
        source = handle.read()
    for name in ACTION:
        assert source.count('"%s"' % name) >= 1, name
    assert len(ACTION) == 10
