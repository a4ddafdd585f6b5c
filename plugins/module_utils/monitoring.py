# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The monitoring role's decisions, and what reads its Prometheus.

The role (roles/monitoring) runs the distribution's ``prometheus`` on the
head and ``prometheus-node-exporter`` on every node. What they run is
decided here, through the collection's filters:

* prometheus_config(): prometheus.yml, one static job per source (vLLM's
  /metrics on the head, every node's Ray metrics export port and node
  exporter, Prometheus itself), each target labelled with its node's
  inventory name (``node``), which every alert and the status table carry;
* prometheus_args() / node_exporter_args() and default_file(): the ARGS
  line of /etc/default/prometheus and /etc/default/prometheus-node-exporter,
  which the packages' units pass to the daemons word by word;
* rule_settings(): the values the alert rules template takes besides its
  thresholds (the twins' device names and the models' mount points as
  PromQL regexes).

What reads it back: query() and alerts() (Prometheus's HTTP API through
ansible-core's open_url), status() (the one-screen table of
playbooks/status.yml), firing() (the firing alerts verify.yml names, with
what to do, from the rules' own annotations) and dashboard_queries()
(every panel's PromQL of the shipped Grafana dashboard;
scripts/dashboard_check.py runs them).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from urllib.parse import urlencode

# Job names, as the rules, the dashboard and the status table select them.
JOB_VLLM = "vllm"
JOB_RAY = "ray"
JOB_NODE = "node"
JOB_PROMETHEUS = "prometheus"
JOBS = (JOB_VLLM, JOB_RAY, JOB_NODE, JOB_PROMETHEUS)
# The label every target carries: the inventory name of its node.
NODE_LABEL = "node"

# What Prometheus takes as a duration (model.ParseDuration): units from
# milliseconds to years, largest first, e.g. 15s, 1m30s, 15d.
_DURATION = re.compile(r"^(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?$")
_DURATION_SECONDS = (("ms", 0.001), ("y", 365 * 86400), ("w", 7 * 86400), ("d", 86400), ("h", 3600),
                     ("m", 60), ("s", 1))
# What --storage.tsdb.retention.size takes: a number and a byte unit.
_SIZE = re.compile(r"^[0-9]+(B|KB|MB|GB|TB|PB|EB)$")
# A word the packages' units pass on as one argument: systemd splits an
# unquoted $ARGS at whitespace, and the packages' init scripts source the
# file in sh, so no quote, backslash, backtick or $ expansion either.
_UNSAFE_ARG = re.compile(r"""[\s"'\\`]|\$[A-Za-z_{(]""")


def is_duration(value):
    """Whether ``value`` is a Prometheus duration (non-empty, not 0)."""
    text = str(value)
    return bool(text) and bool(_DURATION.match(text)) and seconds(text) > 0


def seconds(duration):
    """Seconds of a Prometheus duration such as 1m30s."""
    text, total = str(duration), 0.0
    for match in re.finditer(r"([0-9]+)(ms|y|w|d|h|m|s)", text):
        total += int(match.group(1)) * dict(_DURATION_SECONDS)[match.group(2)]
    return total


def is_size(value):
    return bool(_SIZE.match(str(value)))


def listen_address(address, port):
    """host:port of one listen address, IPv6 in brackets ([::1]:9100)."""
    host = str(address)
    ip = ipaddress.ip_address(host)
    return "[%s]:%d" % (host, int(port)) if ip.version == 6 else "%s:%d" % (host, int(port))


def is_wildcard(address):
    return ipaddress.ip_address(str(address)).is_unspecified


def _check_arg(arg):
    if not arg or _UNSAFE_ARG.search(arg):
        raise ValueError("%r cannot go into an ARGS line of /etc/default: no spaces, quotes, backslashes, "
                         "backticks or $ expansions (the unit splits ARGS at spaces, the init script sources it)"
                         % (arg,))
    return arg


def prometheus_args(settings):
    """The prometheus daemon's arguments.

    ``settings``: listen_address (one: Prometheus 2.x takes a single
    --web.listen-address), port, config_file, retention_time,
    retention_size ("" for none), extra_args."""
    s = settings
    if not is_duration(s["retention_time"]):
        raise ValueError("retention_time %r is not a Prometheus duration such as 15d" % (s["retention_time"],))
    args = ["--config.file=%s" % s["config_file"],
            "--web.listen-address=%s" % listen_address(s["listen_address"], s["port"]),
            "--storage.tsdb.retention.time=%s" % s["retention_time"]]
    if s.get("retention_size"):
        if not is_size(s["retention_size"]):
            raise ValueError("retention_size %r is not a size such as 4GB" % (s["retention_size"],))
        args.append("--storage.tsdb.retention.size=%s" % s["retention_size"])
    args += [str(a) for a in s.get("extra_args") or []]
    return [_check_arg(a) for a in args]


def node_exporter_args(settings):
    """The node exporter's arguments: one --web.listen-address per address
    (node exporter 1.5 and later take it repeated), then extra_args.

    ``settings``: listen_addresses, port, extra_args."""
    addresses = list(settings["listen_addresses"] or [])
    if not addresses:
        raise ValueError("the node exporter needs at least one listen address")
    args = ["--web.listen-address=%s" % listen_address(a, settings["port"]) for a in addresses]
    args += [str(a) for a in settings.get("extra_args") or []]
    return [_check_arg(a) for a in args]


def default_file(package, args):
    """/etc/default/<package> as the role writes it: the ARGS line the unit reads."""
    return ("# Written by laguna.spark (role monitoring); changes here are overwritten.\n"
            "# %s reads its arguments from ARGS (the package's unit: ExecStart=... $ARGS).\n"
            'ARGS="%s"\n') % (package, " ".join(_check_arg(a) for a in args))


def scrape_address(node):
    """The address Prometheus scrapes a node's exporters at: its RoCE address.

    ``node``: {name, roce_ip, listen_addresses} (its node exporter's). The
    exporter must listen there (or on a wildcard address)."""
    roce_ip = str(node["roce_ip"])
    listening = [str(a) for a in node.get("listen_addresses") or []]
    if roce_ip in listening or any(is_wildcard(a) for a in listening):
        return roce_ip
    raise ValueError("the node exporter of %s listens on %s, not on its RoCE address %s, where the head's "
                     "Prometheus scrapes it: add %s to monitoring_node_exporter_listen_addresses"
                     % (node["name"], ", ".join(listening) or "nothing", roce_ip, roce_ip))


def prometheus_config(settings):
    """prometheus.yml as a dict.

    ``settings``: scrape_interval, scrape_timeout (None: Prometheus's 10s,
    capped at the interval), evaluation_interval, rules_file, head (the
    head's inventory name), nodes ([{name, roce_ip, listen_addresses}], the
    cluster in inventory order), node_exporter_port, ray (whether to scrape
    Ray), ray_metrics_port, vllm_target (host:port of vLLM's API),
    prometheus_target (host:port Prometheus listens on)."""
    s = settings
    for key in ("scrape_interval", "evaluation_interval"):
        if not is_duration(s[key]):
            raise ValueError("%s %r is not a Prometheus duration such as 15s" % (key, s[key]))
    timeout = s.get("scrape_timeout") or None
    if timeout is None:
        timeout = s["scrape_interval"] if seconds(s["scrape_interval"]) < 10 else "10s"
    elif not is_duration(timeout) or seconds(timeout) > seconds(s["scrape_interval"]):
        raise ValueError("scrape_timeout %r must be a duration no longer than scrape_interval %s"
                         % (timeout, s["scrape_interval"]))
    nodes = list(s["nodes"])
    names = [n["name"] for n in nodes]
    if s["head"] not in names:
        raise ValueError("the head %s is not among the nodes %s" % (s["head"], ", ".join(names)))

    def per_node(port):
        return [{"targets": ["%s:%d" % (scrape_address(n), int(port))], "labels": {NODE_LABEL: n["name"]}}
                for n in nodes]

    jobs = [
        {"job_name": JOB_PROMETHEUS,
         "static_configs": [{"targets": [s["prometheus_target"]], "labels": {NODE_LABEL: s["head"]}}]},
        {"job_name": JOB_VLLM, "metrics_path": "/metrics",
         "static_configs": [{"targets": [s["vllm_target"]], "labels": {NODE_LABEL: s["head"]}}]},
        {"job_name": JOB_NODE, "static_configs": per_node(s["node_exporter_port"])},
    ]
    if s.get("ray", True):
        jobs.append({"job_name": JOB_RAY, "static_configs": per_node(s["ray_metrics_port"])})
    return {
        "global": {"scrape_interval": s["scrape_interval"], "scrape_timeout": timeout,
                   "evaluation_interval": s["evaluation_interval"]},
        "rule_files": [s["rules_file"]],
        "scrape_configs": jobs,
    }


def promql_regex(values):
    """A PromQL regex (for =~, fully anchored by Prometheus) matching exactly
    ``values``, as it goes between double quotes in a PromQL string."""
    items = sorted(set(str(v) for v in values if str(v)))
    if not items:
        raise ValueError("no values to match")
    # re.escape, then every backslash doubled for the PromQL string literal.
    return "|".join(re.escape(v).replace("\\", "\\\\") for v in items)


def rule_settings(settings):
    """What the alert rules template takes besides its thresholds.

    ``settings``: roce_netdevs (the twins' device names, the union over the
    nodes), model_mountpoints (likewise), window (the rate window)."""
    if not is_duration(settings["window"]):
        raise ValueError("window %r is not a Prometheus duration such as 5m" % (settings["window"],))
    return {"roce_devices": promql_regex(settings["roce_netdevs"]),
            "roce_netdevs": sorted(set(str(d) for d in settings["roce_netdevs"])),
            "model_mountpoints": promql_regex(settings["model_mountpoints"]),
            "window": settings["window"]}


def union(lists):
    """The items of several lists, each once, in first-seen order."""
    out = []
    for items in lists:
        for item in items or []:
            if item not in out:
                out.append(item)
    return out


# The fact each node sets for the head (tasks/render.yml): its RoCE address,
# its node exporter's listen addresses, its twins and its models' mount point.
NODE_FACT = "monitoring_node_facts"


def cluster_nodes(hosts, hostvars):
    """[{name, roce_ip, listen_addresses, netdevs, mountpoint}] of the cluster's
    hosts, from each one's NODE_FACT; a host that has not set it (outside a
    --limit) is taken at its laguna_roce_ip, with nothing found on it."""
    nodes = []
    for host in hosts:
        facts = hostvars[host].get(NODE_FACT)
        if facts:
            nodes.append({"name": host, "roce_ip": str(facts["roce_ip"]),
                          "listen_addresses": [str(a) for a in facts.get("listen_addresses") or []],
                          "netdevs": [str(d) for d in facts.get("netdevs") or []],
                          "mountpoint": facts.get("mountpoint") or None})
        else:
            roce_ip = str(hostvars[host].get("laguna_roce_ip", ""))
            if not roce_ip:
                raise ValueError("%s has no laguna_roce_ip" % host)
            nodes.append({"name": host, "roce_ip": roce_ip, "listen_addresses": [roce_ip], "netdevs": [],
                          "mountpoint": None})
    return nodes


def render(hosts, hostvars, settings):
    """What the role writes on one node: {node_exporter_default, and on the
    head prometheus_default, prometheus_config, rules (rule_settings())}.

    ``settings``: is_head, head, node_exporter ({listen_addresses, port,
    extra_args}: this node's), prometheus ({listen_address, port,
    retention_time, retention_size, extra_args}), config_file, rules_file,
    scrape_interval, evaluation_interval, ray, ray_metrics_port,
    vllm_target, window, roce_netdevs and model_mountpoints (explicit
    lists; empty: what the nodes found), fallback_netdevs (when no node
    found any)."""
    s = settings
    out = {"node_exporter_default": default_file("prometheus-node-exporter", node_exporter_args(s["node_exporter"])),
           "prometheus_default": None, "prometheus_config": None, "rules": None}
    if not _truthy(s["is_head"]):
        return out
    nodes = cluster_nodes(hosts, hostvars)
    prom = dict(s["prometheus"], config_file=s["config_file"])
    out["prometheus_default"] = default_file("prometheus", prometheus_args(prom))
    out["prometheus_config"] = prometheus_config({
        "scrape_interval": s["scrape_interval"], "evaluation_interval": s["evaluation_interval"],
        "scrape_timeout": s.get("scrape_timeout"), "rules_file": s["rules_file"], "head": s["head"],
        "nodes": nodes, "node_exporter_port": s["node_exporter"]["port"], "ray": _truthy(s["ray"]),
        "ray_metrics_port": s["ray_metrics_port"], "vllm_target": s["vllm_target"],
        "prometheus_target": listen_address(_loopback_for(prom["listen_address"]), prom["port"])})
    netdevs = list(s.get("roce_netdevs") or []) or union(n["netdevs"] for n in nodes) or list(s["fallback_netdevs"])
    mounts = list(s.get("model_mountpoints") or []) or union([n["mountpoint"]] for n in nodes if n["mountpoint"])
    if not mounts:
        raise ValueError("no node reported the mount point of the models: set monitoring_model_mountpoints")
    out["rules"] = rule_settings({"roce_netdevs": netdevs, "model_mountpoints": mounts, "window": s["window"]})
    return out


def _truthy(value):
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def _loopback_for(address):
    """Where Prometheus scrapes itself: its listen address, loopback for a wildcard one."""
    if is_wildcard(address):
        return "::1" if ipaddress.ip_address(str(address)).version == 6 else "127.0.0.1"
    return str(address)


# --- Reading Prometheus ------------------------------------------------------

class PrometheusError(Exception):
    """Prometheus could not be read, or answered an error."""


def _get(url, timeout, open_url):
    try:
        response = open_url(url, method="GET", timeout=timeout, follow_redirects="none",
                            headers={"Accept": "application/json"})
        body = response.read()
    except Exception as exc:  # urllib raises several unrelated types
        detail = ""
        reader = getattr(exc, "read", None)
        if reader is not None:
            try:
                detail = json.loads(reader().decode("utf-8", "replace")).get("error", "")
            except Exception:  # an unreadable body leaves the message alone
                detail = ""
        raise PrometheusError("%s: %s%s" % (url, exc, (" (%s)" % detail) if detail else ""))
    try:
        doc = json.loads(body.decode("utf-8"))
    except ValueError:
        raise PrometheusError("%s did not answer JSON: is it Prometheus's HTTP API?" % url)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise PrometheusError("%s: %s" % (url, doc.get("error") if isinstance(doc, dict) else doc))
    return doc.get("data")


def query(base_url, promql, timeout, open_url):
    """An instant query: [(labels dict, float value)] of a vector (a scalar: one item, no labels)."""
    data = _get("%s/api/v1/query?%s" % (base_url.rstrip("/"), urlencode({"query": promql})), timeout, open_url)
    kind, result = (data or {}).get("resultType"), (data or {}).get("result")
    if kind == "vector":
        return [(dict(item.get("metric") or {}), float(item["value"][1])) for item in result or []]
    if kind == "scalar":
        return [({}, float(result[1]))]
    raise PrometheusError("%s: an instant query answered a %s, not a vector" % (promql, kind))


def alerts(base_url, timeout, open_url):
    """Prometheus's active alerts (/api/v1/alerts): pending and firing."""
    data = _get("%s/api/v1/alerts" % base_url.rstrip("/"), timeout, open_url)
    return list((data or {}).get("alerts") or [])


def firing(active):
    """The firing alerts, sorted, each {name, node, severity, summary, action, since}.

    summary and action are the rule's annotations (the rules file says what
    each alert means and what to do, and nothing else repeats it)."""
    out = []
    for alert in active:
        if alert.get("state") != "firing":
            continue
        labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
        out.append({"name": labels.get("alertname", "?"), "node": labels.get(NODE_LABEL, ""),
                    "severity": labels.get("severity", ""), "summary": notes.get("summary", ""),
                    "action": notes.get("action", ""), "since": alert.get("activeAt", "")})
    return sorted(out, key=lambda a: (a["node"], a["name"], a["summary"]))


def firing_message(items, url):
    """One sentence per firing alert, naming it and what to do."""
    if not items:
        return "No alert fires at %s." % url
    lines = ["%d alert(s) fire at %s:" % (len(items), url)]
    for item in items:
        lines.append("%s%s: %s %s" % (item["name"], (" on %s" % item["node"]) if item["node"] else "",
                                      item["summary"].rstrip("."), ("- " + item["action"]) if item["action"] else ""))
    return " ".join(line.strip() for line in lines)


# What the status table shows, per node (by the ``node`` label): a name and
# the PromQL ({window} is the rate window).
STATUS_QUERIES = {
    "up": 'up',
    "tok_s": 'sum by (node) (rate(vllm:generation_tokens_total{job="vllm"}[{window}]))',
    "acceptance": ('sum by (node) (rate(vllm:spec_decode_num_accepted_tokens_total{job="vllm"}[{window}]))'
                   ' / sum by (node) (rate(vllm:spec_decode_num_draft_tokens_total{job="vllm"}[{window}]))'),
    "ttft_p50": ('histogram_quantile(0.5, sum by (node, le) '
                 '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[{window}])))'),
    "ttft_p95": ('histogram_quantile(0.95, sum by (node, le) '
                 '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[{window}])))'),
    "kv_usage": 'max by (node) (vllm:kv_cache_usage_perc{job="vllm"})',
    "running": 'sum by (node) (vllm:num_requests_running{job="vllm"})',
    "memory_used": ('node_memory_MemTotal_bytes{job="node"} - node_memory_MemAvailable_bytes{job="node"}'),
}


def status_queries(window):
    return dict((key, promql.replace("{window}", window)) for key, promql in STATUS_QUERIES.items())


def _number(value):
    return None if value is None or math.isnan(value) else value  # NaN: no data


def status(nodes, head, results, active):
    """The status table's rows, one per node in ``nodes`` (inventory order).

    ``results``: {STATUS_QUERIES key: [(labels, value)]} as query() returns
    them; ``active``: alerts() of Prometheus. A figure without data is None."""
    per_node = {}
    for key, samples in results.items():
        for labels, value in samples:
            node = labels.get(NODE_LABEL)
            if node is None:
                continue
            if key == "up":
                per_node.setdefault(node, {}).setdefault("up", {})[labels.get("job", "?")] = value == 1.0
            else:
                per_node.setdefault(node, {})[key] = _number(value)
    ray_up = [v for labels, v in results.get("up", []) if labels.get("job") == JOB_RAY]
    fired = firing(active)
    rows = []
    for name in nodes:
        got = per_node.get(name, {})
        row = {"node": name, "role": "head" if name == head else "worker", "targets": got.get("up", {})}
        for key in ("tok_s", "acceptance", "ttft_p50", "ttft_p95", "kv_usage", "running", "memory_used"):
            row[key] = got.get(key)
        row["ray_nodes"] = {"up": sum(1 for v in ray_up if v == 1.0), "scraped": len(ray_up)}
        row["alerts"] = [a["name"] for a in fired if a["node"] == name]
        rows.append(row)
    other = [a["name"] for a in fired if a["node"] not in nodes]
    return rows, other


def _fmt(value, spec, scale=1.0, suffix=""):
    return "-" if value is None else (spec % (value * scale)) + suffix


def table(rows):
    """The rows as text lines, one screen wide (what playbooks/status.yml prints)."""
    header = ("node", "role", "targets", "tok/s", "accept", "TTFT p50/p95", "KV", "running", "Ray nodes",
              "mem used", "alerts")
    lines = [header]
    for row in rows:
        targets = " ".join("%s:%s" % (job, "up" if ok else "DOWN") for job, ok in sorted(row["targets"].items()))
        lines.append((
            row["node"], row["role"], targets or "none scraped",
            _fmt(row["tok_s"], "%.1f"), _fmt(row["acceptance"], "%.0f", 100, "%"),
            "%s/%s" % (_fmt(row["ttft_p50"], "%.2f", 1, "s"), _fmt(row["ttft_p95"], "%.2f", 1, "s")),
            _fmt(row["kv_usage"], "%.0f", 100, "%"), _fmt(row["running"], "%.0f"),
            "%d/%d" % (row["ray_nodes"]["up"], row["ray_nodes"]["scraped"]),
            _fmt(row["memory_used"], "%.1f", 1e-9, " GB"),
            ", ".join(row["alerts"]) or "none"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]


# --- The dashboard -------------------------------------------------------------

DASHBOARD_UID = "laguna-spark-overview"


def _panels(panels):
    for panel in panels or []:
        yield panel
        # A collapsed row keeps its panels inside it.
        yield from _panels(panel.get("panels"))


def dashboard_queries(model):
    """[{id, title, queries: [{ref, expr, legend}]}] of every panel of a
    Grafana dashboard model that has a type other than row, in order."""
    out = []
    for panel in _panels(model.get("panels")):
        if panel.get("type") == "row":
            continue
        queries = [{"ref": t.get("refId", ""), "expr": t.get("expr", ""), "legend": t.get("legendFormat", "")}
                   for t in panel.get("targets") or []]
        out.append({"id": panel.get("id"), "title": panel.get("title", ""), "queries": queries})
    return out


def template_variables(model):
    """{name: current value} of the dashboard's template variables (text)."""
    values = {}
    for var in (model.get("templating") or {}).get("list") or []:
        current = var.get("current") or {}
        value = current.get("value", var.get("query", ""))
        values[var.get("name", "")] = value if isinstance(value, str) else "|".join(value)
    return values


def expand(expr, variables, rate_interval):
    """A panel's PromQL as Grafana sends it: $__rate_interval and the
    dashboard's variables ($name, ${name}) replaced by their values."""
    text = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    for name in sorted(variables, key=len, reverse=True):
        text = text.replace("${%s}" % name, variables[name]).replace("$%s" % name, variables[name])
    return text


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PROMQL_WORDS = set("""sum min max avg count stddev stdvar topk bottomk quantile count_values group by without on
ignoring group_left group_right and or unless offset bool rate irate increase delta idelta deriv histogram_quantile
label_replace label_join vector scalar abs absent absent_over_time clamp_min clamp_max ceil floor round sort
sort_desc time timestamp predict_linear resets changes avg_over_time max_over_time min_over_time sum_over_time
count_over_time last_over_time e inf nan""".split())


def metric_names(expr):
    """The metric names a PromQL expression selects (label names, functions,
    keywords, durations and strings left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)   # strings
    text = re.sub(r"\{[^}]*\}", "{}", text)          # label matchers
    text = re.sub(r"\[[^\]]*\]", "[]", text)         # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1()", text)
    names = []
    for match in _NAME.finditer(text):
        word = match.group(0)
        if word in _PROMQL_WORDS or text[match.end():].lstrip().startswith("("):
            continue  # a keyword, a function or an aggregation
        if match.start() and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # the exponent of a number such as 1e9
        if word not in names:
            names.append(word)
    return names
