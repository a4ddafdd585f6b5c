#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_report
short_description: Write the benchmark's JSON, Markdown report and PNG plots
version_added: "0.1.0"
description:
  - Turns the raw results that C(playbooks/benchmark.yml) collects (decode
    runs per configuration, TTFT per prompt length, greedy outputs, memory
    per node, vLLM log lines) into C(results.json), C(report.md) with the
    recipe's figures side by side, and the plots C(tok_s_vs_k.png),
    C(acceptance_by_position.png) and C(ttft_vs_prompt.png) in O(dest).
  - A report of a stand-in server (C(/version) containing C(laguna.standin))
    says so on its first line, and labels its figures as the stand-in's.
  - Each PNG carries the data it plots as JSON in its C(Description) text chunk.
  - Runs where the report is wanted, normally the controller (C(delegate_to localhost));
    the plots need matplotlib there.
  - Files whose content is unchanged are left alone.
options:
  results:
    description: Raw results as the benchmark playbook collects them. Required unless O(preflight).
    type: dict
  dest:
    description: Directory to write into; created when missing.
    type: path
    required: true
  plots:
    description: Draw the PNG plots (needs matplotlib).
    type: bool
    default: true
  preflight:
    description:
      - Only check that O(dest) can be created and written and, with O(plots),
        that matplotlib imports, so that a long benchmark does not fail at its end.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reports what would be written and writes nothing.
  platform:
    support: full
    platforms: posix
    description: Any POSIX controller or node.
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Can the report be written here?
  laguna.spark.bench_report:
    dest: "{{ playbook_dir }}/../benchmark-results/now"
    preflight: true
  delegate_to: localhost

- name: Write the report
  laguna.spark.bench_report:
    results: "{{ benchmark_raw }}"
    dest: "{{ playbook_dir }}/../benchmark-results/now"
  delegate_to: localhost
"""

RETURN = r"""
dest:
  description: The results directory.
  returned: always
  type: str
files:
  description: Paths of results.json, report.md and the plots.
  returned: success and not preflight
  type: list
  elements: str
matplotlib:
  description: matplotlib's version, null when plots are off.
  returned: always
  type: str
standin:
  description: Whether the results come from the stand-in server.
  returned: success and not preflight
  type: bool
first_line:
  description: The report's first line.
  returned: success and not preflight
  type: str
comparison:
  description: The recipe-versus-this-run rows (figure, recipe, measured).
  returned: success and not preflight
  type: list
  elements: dict
best_k:
  description: The k with the highest median decode tok/s.
  returned: success and not preflight
  type: int
identical:
  description: Whether every greedy output with the draft matched the baseline's; null when not checked.
  returned: success and not preflight
  type: bool
failures:
  description: Steps that failed (step, error).
  returned: success and not preflight
  type: list
  elements: dict
"""

import json
import os

from ansible_collections.laguna.spark.plugins.module_utils import bench_report
from ansible_collections.laguna.spark.plugins.module_utils.files import read_bytes, write_atomic
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def _matplotlib_version():
    import matplotlib
    return matplotlib.__version__


def _write(module, path, data):
    """Write bytes atomically (files.write_atomic); False when the file already holds them."""
    if read_bytes(path) == data:
        return False
    write_atomic(module, path, data)
    return True


def main():
    module = new_module(dict(
        results=dict(type="dict"),
        dest=dict(type="path", required=True),
        plots=dict(type="bool", default=True),
        preflight=dict(type="bool", default=False),
    ), required_if=[("preflight", False, ["results"])])
    params = module.params
    dest = params["dest"]
    result = dict(changed=False, dest=dest, matplotlib=None)
    if params["plots"]:
        try:
            result["matplotlib"] = _matplotlib_version()
        except ImportError as exc:
            module.fail_json(msg="The benchmark's plots need matplotlib on %s (%s): install it "
                                 "(pip install -r requirements.txt) or set plots to false." % (
                                     "the controller", exc), **result)
    if params["preflight"]:
        parent = dest
        while not os.path.exists(parent):
            parent = os.path.dirname(parent) or "."
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            module.fail_json(msg="%s cannot be written (%s is not a writable directory)" % (dest, parent), **result)
        module.exit_json(**result)

    report = bench_report.build(params["results"])
    names = {"json": "results.json", "markdown": "report.md"}
    plot_paths = {name: os.path.join(dest, name + ".png") for name in bench_report.PLOTS} if params["plots"] else {}
    files = [os.path.join(dest, names["json"]), os.path.join(dest, names["markdown"])] + \
        [plot_paths[name] for name in bench_report.PLOTS if name in plot_paths]
    text = bench_report.markdown(report, [(name, name + ".png") for name in bench_report.PLOTS if name in plot_paths])
    result.update(files=files, standin=report["standin"], first_line=text.splitlines()[0],
                  comparison=report["comparison"], best_k=report["best_k"], failures=report["failures"],
                  identical=report["identity"]["all_identical"])
    if module.check_mode:
        result["changed"] = True
        module.exit_json(**result)
    try:
        if not os.path.isdir(dest):
            os.makedirs(dest, 0o755)
        changed = _write(module, files[0], (json.dumps(report, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        changed = _write(module, files[1], text.encode("utf-8")) or changed
        if plot_paths:
            drawn = {name: os.path.join(module.tmpdir, name + ".png") for name in plot_paths}
            bench_report.render_plots(report, drawn)
            for name in bench_report.PLOTS:
                with open(drawn[name], "rb") as handle:
                    changed = _write(module, plot_paths[name], handle.read()) or changed
    except (IOError, OSError) as exc:
        module.fail_json(msg="Could not write the report to %s: %s" % (dest, exc), **result)
    result["changed"] = changed
    module.exit_json(**result)


if __name__ == "__main__":
    main()
