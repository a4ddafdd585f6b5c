#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: monitoring_status
short_description: Read the cluster's state and firing alerts from the head's Prometheus
version_added: "0.4.0"
description:
  - Asks Prometheus's HTTP API (instant queries, C(/api/v1/query), and C(/api/v1/alerts)) for one row
    per node of O(nodes) - which of its targets answer, generated tokens per second, spec-decode
    acceptance, time to first token (50th and 95th percentile), KV-cache usage, running requests, Ray
    nodes answering, memory in use and the alerts that fire on it - over the last O(window), and
    renders them as a table one screen wide.
  - Lists the firing alerts with the rule's own C(summary) and C(action) annotations; with
    O(fail_on_firing), fails naming each one and what to do.
  - Every series it reads carries the C(node) label that the monitoring role gives each target.
  - Read-only.
options:
  url:
    description: Base URL of Prometheus's HTTP API.
    type: str
    default: http://127.0.0.1:9090
  timeout:
    description: HTTP timeout of each request, in seconds.
    type: int
    default: 10
  window:
    description: The rate window of the figures, a Prometheus duration.
    type: str
    default: 5m
  nodes:
    description: The cluster's inventory names, the rows' order.
    type: list
    elements: str
    required: true
  head:
    description: The head's inventory name (where vLLM runs).
    type: str
    required: true
  fail_on_firing:
    description: Fail when an alert fires, naming each one and what to do.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Only sends GET requests; the same result in check mode.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host that reaches Prometheus (the head, where it listens on loopback by default).
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The cluster at a glance
  laguna.spark.monitoring_status:
    url: http://127.0.0.1:9090
    nodes: "{{ laguna_cluster_hosts }}"
    head: "{{ laguna_head_host }}"
  register: status

- name: Show it
  ansible.builtin.debug:
    msg: "{{ status.table }}"
"""

RETURN = r"""
rows:
  description:
    - One per node of O(nodes), in order - C(node), C(role) (head or worker), C(targets) (job name to
      whether it answers), C(tok_s), C(acceptance) (a share), C(ttft_p50) and C(ttft_p95) (seconds),
      C(kv_usage) (a share), C(running), C(memory_used) (bytes), C(ray_nodes) (C(up) of C(scraped))
      and C(alerts) (names of the alerts firing on the node).
    - A figure without data (no request in the window, a source that does not export it) is null.
  returned: always
  type: list
  elements: dict
table:
  description: The rows as text lines, a header first.
  returned: always
  type: list
  elements: str
firing:
  description: The firing alerts, each C(name), C(node), C(severity), C(summary), C(action) and C(since).
  returned: always
  type: list
  elements: dict
message:
  description: One sentence per firing alert, naming it and what to do (or that none fires).
  returned: always
  type: str
"""

from ansible.module_utils.urls import open_url
from ansible_collections.laguna.spark.plugins.module_utils import monitoring
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        url=dict(type="str", default="http://127.0.0.1:9090"),
        timeout=dict(type="int", default=10),
        window=dict(type="str", default="5m"),
        nodes=dict(type="list", elements="str", required=True),
        head=dict(type="str", required=True),
        fail_on_firing=dict(type="bool", default=False),
    ))
    url, timeout, window = module.params["url"].rstrip("/"), module.params["timeout"], module.params["window"]
    if not monitoring.is_duration(window):
        module.fail_json(msg="window %r is not a Prometheus duration such as 5m" % window)
    try:
        results = dict((key, monitoring.query(url, promql, timeout, open_url))
                       for key, promql in monitoring.status_queries(window).items())
        active = monitoring.alerts(url, timeout, open_url)
    except monitoring.PrometheusError as exc:
        module.fail_json(msg="Could not read Prometheus at %s: %s. Is monitoring on (laguna_monitoring) and "
                             "Prometheus running on the head (systemctl status prometheus)?" % (url, exc))
    rows, _other = monitoring.status(module.params["nodes"], module.params["head"], results, active)
    firing = monitoring.firing(active)
    result = dict(changed=False, rows=rows, table=monitoring.table(rows), firing=firing,
                  message=monitoring.firing_message(firing, url))
    if module.params["fail_on_firing"] and firing:
        module.fail_json(msg=result["message"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
