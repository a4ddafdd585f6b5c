"""A Prometheus HTTP API double: /api/v1/query answered from a table, /api/v1/alerts, /-/ready.

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(api))

``api`` is an Api: ``vectors`` maps a PromQL text (exactly as sent) to the
vector it answers ([(labels, value)]); a query it does not know answers an
empty vector, or (``strict``) Prometheus's 400 "bad_data" error.
``alerts`` is /api/v1/alerts' list. The answers have the shape of
Prometheus 2.x's API (status, data.resultType, data.result with
[timestamp, "value"] pairs; errors with errorType and error); ``seen`` lists
the queries received. tests/integration/test_monitoring_prometheus.py runs
the same readers against the real Prometheus.
"""

from __future__ import annotations

import json
import math
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit


class Api:
    def __init__(self, vectors=None, alerts=None, strict=False, status=200):
        self.vectors = dict(vectors or {})
        self.alerts = list(alerts or [])
        self.strict = strict
        self.status = status
        self.seen = []


def _vector(samples):
    now = time.time()
    return [{"metric": dict(labels), "value": [now, "NaN" if math.isnan(value) else repr(float(value))]}
            for labels, value in samples]


def handler_for(api):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, code, doc):
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            if api.status != 200:
                return self.send(api.status, {"status": "error", "errorType": "internal", "error": "down"})
            if parts.path == "/-/ready":
                return self.send(200, {})
            if parts.path == "/api/v1/alerts":
                return self.send(200, {"status": "success", "data": {"alerts": api.alerts}})
            if parts.path == "/api/v1/query":
                expr = parse_qs(parts.query).get("query", [""])[0]
                api.seen.append(expr)
                if expr not in api.vectors and api.strict:
                    return self.send(400, {"status": "error", "errorType": "bad_data",
                                           "error": "1:1: parse error: unknown query %r" % expr})
                return self.send(200, {"status": "success", "data": {
                    "resultType": "vector", "result": _vector(api.vectors.get(expr, []))}})
            return self.send(404, {"status": "error", "errorType": "not_found", "error": "no such path"})

    return Handler
