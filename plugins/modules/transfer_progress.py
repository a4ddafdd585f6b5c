#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: transfer_progress
short_description: Wait a while for a running download or mirror, and say how far it got
version_added: "0.2.0"
description:
  - Waits up to O(wait) seconds for the async job whose C(results_file) is
    O(results_file) to finish, then reports bytes done of O(total) and the rate.
  - Says whether to keep waiting (RV(keep_waiting)), which is not once the
    job has finished, nor once it has gone on longer than its O(timeout)
    allows (RV(expired)), which only happens when the job's wrapper is gone
    without writing its result.
  - Bytes done come from O(progress_file) (written by M(laguna.spark.model_mirror))
    or, for C(hf download), from the files under O(path) that O(expected)
    names plus the partial C(*.incomplete) files in C(.cache/huggingface/download).
  - Read-only; supports check mode.
attributes:
  check_mode:
    support: full
    description: Only reads and waits; the same result in check mode.
  platform:
    support: full
    platforms: posix
    description: The POSIX host the async job runs on, whose files it reads.
extends_documentation_fragment: [laguna.spark.attributes.no_diff]
options:
  results_file:
    description: The async job's results file (an async task's registered C(results_file)).
    type: path
    required: true
  wait:
    description: Longest wait, in seconds.
    type: int
    default: 30
  timeout:
    description:
      - The async job's timeout in seconds (its C(async) value).
      - The job's wrapper stops it then and writes a result; when none has come
        more than O(timeout) + O(wait) + 10 seconds after the job started,
        RV(expired) is true. The job started when its O(results_file) was
        last written (O(started) until that file exists).
    type: int
    required: true
  total:
    description: Bytes the transfer has to move in all.
    type: int
    required: true
  base:
    description: Bytes already in place when the transfer started (not counted in the rate).
    type: int
    default: 0
  started:
    description: When the transfer started, in seconds since the epoch.
    type: float
    required: true
  progress_file:
    description: JSON progress (V(done), V(total)) written by the transfer.
    type: path
  path:
    description: Directory a C(hf download) writes to.
    type: path
  expected:
    description: Relative paths of the files the download brings (for O(path)).
    type: list
    elements: str
    default: []
  label:
    description: What is being transferred, for RV(msg).
    type: str
    default: transfer
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait for the download, with progress
  laguna.spark.transfer_progress:
    results_file: "{{ job.results_file }}"
    path: /home/spark/models/hf/Laguna-S-2.1-FP8
    expected: "{{ head.refetch }}"
    total: 121000000000
    started: "{{ started }}"
    timeout: 21600
  register: tick
  until: not tick.keep_waiting
  retries: 720
  delay: 0
"""

RETURN = r"""
finished:
  description: Whether the job has finished (the caller then reads its result with async_status).
  returned: always
  type: bool
expired:
  description:
    - Not RV(finished), and more than O(timeout) + O(wait) + 10 seconds have passed since the job started.
    - The job's wrapper is gone without writing its result (it writes one on its own timeout); async_status
      will not say the job finished.
  returned: always
  type: bool
keep_waiting:
  description: Neither RV(finished) nor RV(expired).
  returned: always
  type: bool
done:
  description: Bytes done.
  returned: always
  type: int
seconds:
  description: Seconds since O(started).
  returned: always
  type: float
gb_per_s:
  description: Rate since O(started), in GB/s.
  returned: always
  type: float
msg:
  description:
    - "One progress line, e.g. C(laguna-head: download target: 12.40 of 121.00 GB (10.2%), 1.03 GB/s, 12 s)."
    - "It ends in C(, finished) when RV(finished), and in C(, no result after N s: the job's wrapper is gone)
      when RV(expired)."
  returned: always
  type: str
"""

import json
import os
import time

from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


# async_wrapper (ansible-core 2.19, lib/ansible/modules/async_wrapper.py)
# writes the results file through jwrite() (a .tmp file renamed over it):
# once when the job starts, in _run_module(), {"started": True, "finished":
# False, "ansible_job_id": jid}, and again only when the job ends, with the
# module's result, or with {"failed": True, "msg": ...} when the module could
# not be run, or, from its supervisor on its own timeout, {"msg": "Timeout
# exceeded", "failed": True, "child_pid": ...} (none of these with
# "started"). So, until the job ends, the file's mtime is when it started.
# The supervisor checks the time limit every 5 s (half the limit when that is
# shorter) and writes its result 1 s after the kill: it may be up to ~6 s
# late, hence the slack before a missing result means the wrapper is gone.
WRAPPER_SLACK = 10


def job_finished(results_file):
    try:
        with open(results_file) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False  # not written yet, or being written
    return not data.get("started") or bool(data.get("finished"))


def job_started(results_file, started):
    """When the job started: its results file's mtime, or ``started`` while there is none."""
    try:
        return os.stat(results_file).st_mtime
    except OSError:
        return started


def bytes_done(params):
    if params["progress_file"]:
        try:
            with open(params["progress_file"]) as handle:
                return int(json.load(handle).get("done", 0)) + params["base"]
        except (OSError, ValueError):
            return params["base"]
    done = params["base"]
    path = params["path"]
    if not path:
        return done
    for rel in params["expected"]:
        try:
            done += os.path.getsize(os.path.join(path, rel))
        except OSError:
            pass
    partial = os.path.join(path, ".cache", "huggingface", "download")
    if os.path.isdir(partial):
        for root, _dirs, files in os.walk(partial):
            for name in files:
                if name.endswith(".incomplete"):
                    try:
                        done += os.path.getsize(os.path.join(root, name))
                    except OSError:
                        pass
    return done


def main():
    module = new_module(dict(
        results_file=dict(type="path", required=True),
        wait=dict(type="int", default=30),
        timeout=dict(type="int", required=True),
        total=dict(type="int", required=True),
        base=dict(type="int", default=0),
        started=dict(type="float", required=True),
        progress_file=dict(type="path"),
        path=dict(type="path"),
        expected=dict(type="list", elements="str", default=[]),
        label=dict(type="str", default="transfer"),
    ))
    p = module.params
    wait = max(0, min(p["wait"], 600))
    deadline = time.monotonic() + wait
    finished = job_finished(p["results_file"])
    while not finished and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        finished = job_finished(p["results_file"])
    done = min(bytes_done(p), max(p["total"], 0)) if p["total"] else bytes_done(p)
    seconds = max(time.time() - p["started"], 1e-6)
    rate = max(done - p["base"], 0) / seconds / 1e9
    total = max(p["total"], 1)
    # Read here, on the job's host, against this host's clock.
    since_start = time.time() - job_started(p["results_file"], p["started"])
    expired = not finished and since_start > max(p["timeout"], 0) + wait + WRAPPER_SLACK
    msg = "%s: %.2f of %.2f GB (%.1f%%), %.3f GB/s, %d s%s" % (
        p["label"], done / 1e9, p["total"] / 1e9, 100.0 * done / total, rate, seconds,
        ", finished" if finished else "")
    if expired:
        msg += ", no result after %d s: the job's wrapper is gone" % since_start
    module.exit_json(changed=False, finished=finished, expired=expired, keep_waiting=not finished and not expired,
                     done=done, seconds=round(seconds, 3), gb_per_s=round(rate, 3), msg=msg)


if __name__ == "__main__":
    main()
