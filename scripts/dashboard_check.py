"""Run every panel's query of the shipped Grafana dashboard against a Prometheus.

    python3 scripts/dashboard_check.py URL [--dashboard FILE] [--rate-interval 1m]
        [--var NAME=VALUE ...] [--expect-all | --expect PANEL ...] [--skip PANEL=REASON ...] [--json]

For each panel of the dashboard (roles/monitoring/files/laguna-spark-dashboard.json
by default) every query is sent to URL's /api/v1/query as Grafana would send
it at this moment ($__rate_interval and the dashboard's variables replaced:
--var overrides a variable's current value, e.g. --var roce_devices=eth0),
and the panel is reported as "data" when one query returns a sample with a
number, else "no data" (with the first error, if any). Panels are named by
title or id. --expect-all expects data of every panel but those --skip names
(each with the reason, which is printed); --expect names the panels that
must have data. The exit status is 1 when an expected panel has none, 2
when Prometheus cannot be reached at all, 0 otherwise.

Uses only the Python standard library (plugins/module_utils/monitoring.py is
loaded from this checkout for the dashboard's queries), so it runs on any
node that reaches Prometheus.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkout  # noqa: E402  pylint: disable=wrong-import-position

ROOT = checkout.ROOT
DASHBOARD = os.path.join(ROOT, "roles", "monitoring", "files", "laguna-spark-dashboard.json")


def instant(url, expr, timeout):
    """(samples with a number, error or None) of one instant query."""
    query = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen("%s/api/v1/query?%s" % (url.rstrip("/"), query), timeout=timeout) as response:
            doc = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read().decode("utf-8", "replace")).get("error", "")
        except ValueError:
            detail = ""
        return 0, "HTTP %d %s" % (exc.code, detail)
    if doc.get("status") != "success":
        return 0, doc.get("error", "status %s" % doc.get("status"))
    data = doc.get("data") or {}
    result = data.get("result") or []
    if data.get("resultType") == "scalar":
        result = [{"value": result}]
    numbers = 0
    for item in result:
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if not math.isnan(value):
            numbers += 1
    return numbers, None


def check(url, model, rate_interval="5m", variables=None, expected=(), expect_all=False, skipped=None,
          timeout=10):
    """[{id, title, data, expected, reason, queries: [{expr, samples, error}]}] for every panel."""
    mon = checkout.module_utils("monitoring")
    values = dict(mon.template_variables(model), **(variables or {}))
    skipped = dict(skipped or {})
    rows = []
    for panel in mon.dashboard_queries(model):
        names = {str(panel["id"]), panel["title"]}
        queries = []
        for query in panel["queries"]:
            expr = mon.expand(query["expr"], values, rate_interval)
            samples, error = instant(url, expr, timeout)
            queries.append({"expr": expr, "samples": samples, "error": error})
        reason = next((skipped[n] for n in names if n in skipped), None)
        wanted = (expect_all and reason is None) or bool(names & set(expected))
        rows.append({"id": panel["id"], "title": panel["title"], "data": any(q["samples"] for q in queries),
                     "expected": wanted, "reason": reason, "queries": queries})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("url", help="Prometheus's base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--dashboard", default=DASHBOARD)
    parser.add_argument("--rate-interval", default="5m", help="what $__rate_interval stands for")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--expect", action="append", default=[], metavar="PANEL")
    parser.add_argument("--expect-all", action="store_true")
    parser.add_argument("--skip", action="append", default=[], metavar="PANEL=REASON")
    parser.add_argument("--timeout", type=float, default=10)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    with open(args.dashboard) as handle:
        model = json.load(handle)
    variables = dict(v.split("=", 1) for v in args.var)
    skipped = dict(s.split("=", 1) if "=" in s else (s, "skipped") for s in args.skip)
    try:
        urllib.request.urlopen("%s/-/ready" % args.url.rstrip("/"), timeout=args.timeout).close()
    except (OSError, ValueError) as exc:
        print("cannot reach Prometheus at %s: %s" % (args.url, exc), file=sys.stderr)
        return 2
    rows = check(args.url, model, args.rate_interval, variables, args.expect, args.expect_all, skipped,
                 args.timeout)
    missing = [row for row in rows if row["expected"] and not row["data"]]
    if args.json:
        print(json.dumps({"panels": rows, "missing": [row["title"] for row in missing]}, indent=2))
    else:
        for row in rows:
            state = "data" if row["data"] else "no data"
            note = ""
            if row["reason"]:
                note = " (not expected: %s)" % row["reason"]
            elif not row["expected"]:
                note = " (not expected)"
            errors = [q["error"] for q in row["queries"] if q["error"]]
            if errors:
                note += " [%s]" % errors[0]
            print("%-3s %-32s %s%s" % (row["id"], row["title"], state, note))
        if missing:
            print("%d expected panel(s) without data: %s" % (len(missing), ", ".join(r["title"] for r in missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
