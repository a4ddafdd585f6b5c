#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged
short_description: Record what a complete site run left on a node, and tell a later run whether anything changed since
version_added: "0.3.0"
description:
  - The fast no-op path of the site playbook. At the end of a complete,
    successful run (no C(--tags), no C(--check)), O(state=record) writes a
    record on each node - a fingerprint of the run's O(inputs) and evidence of
    what the roles left (the boot, the service user, the user units'
    identities, the stat of every file under O(trees), RoCE GID tables, sysfs
    attributes, the processes matching O(processes), the PIDs holding the GPU).
  - At the start of the next run, O(state=check) gathers the same evidence
    again (as the record's spec says), asks each of the record's O(urls) to
    answer within O(url_timeout) seconds, and returns RV(converged) only when
    the inputs' fingerprint, every piece of evidence and every URL agree. The
    playbook skips the roles only when every node of the play says so.
  - O(smoke) is recorded with O(state=record); each check then runs the
    same smoke test as the verification (module_utils/vllm_health.smoke())
    against O(api_url) once every URL answered, within O(url_timeout)
    seconds (O(smoke.timeout) is not used). A vLLM that lists its model
    while its engine is wedged, or whose answer is wrong, is not converged.
  - A file's stat includes its ctime, which any write or metadata change
    moves, so a changed model shard, patched file, key or netplan file is
    seen without reading it.
attributes:
  check_mode:
    support: full
    description: O(state=check) only reads; O(state=record) writes nothing in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark, laguna.spark.vllm_server.smoke]
options:
  state:
    description:
      - C(check) compares the node with its record; C(record) writes the record.
    type: str
    choices: [check, record]
    default: check
  path:
    description:
      - The record file. Default C(~/.local/state/laguna-spark/converged.json)
        of the user the module runs as (the service user).
    type: path
  inputs:
    description:
      - What the run was asked to do (the collection's file list, every
        laguna.spark variable, the play's hosts); only its sha256 is kept.
      - With O(state=check) and no O(inputs), the action plugin gathers them on
        the controller - every variable with a laguna.spark role's prefix
        (C(laguna_), C(preflight_), C(venv_), C(ssh_mesh_), C(fabric_),
        C(network_gate_), C(linger_), C(staging_), C(vllm_patch_),
        C(ray_cluster_), C(vllm_serve_)), the sha256 of the collection's
        C(FILES.json), the play's hosts, the inventory groups and how this
        host is reached.
    type: dict
  fingerprint:
    description:
      - The RV(fingerprint) the check at the start of this run returned.
      - Required with O(state=record).
    type: str
  digests:
    description:
      - The RV(digests) the check at the start of this run returned (with
        O(state=record)); a later check names the inputs that differ from them.
    type: dict
  units:
    description: User units (of the user the module runs as) whose identity is recorded; each must be active.
    type: list
    elements: str
    default: []
  trees:
    description: Paths (globs allowed) whose every file's stat is recorded.
    type: list
    elements: str
    default: []
  paths:
    description: Paths (globs allowed) whose own stat is recorded (a directory, not its contents).
    type: list
    elements: str
    default: []
  reads:
    description: Small files (globs allowed; sysfs attributes) whose contents are recorded.
    type: list
    elements: str
    default: []
  netdevs:
    description:
      - Network interfaces (every RoCE twin) whose C(mtu) and C(operstate)
        under O(sysfs_net) are recorded, as O(reads) are.
    type: list
    elements: str
    default: []
  sysfs_net:
    description: The C(/sys/class/net) directory.
    type: path
    default: /sys/class/net
  hcas:
    description: RDMA devices whose RoCE GID table (of port O(hca_port)) is recorded whole.
    type: list
    elements: str
    default: []
  hca_port:
    description: The port of O(hcas).
    type: int
    default: 1
  sysfs_infiniband:
    description: The C(/sys/class/infiniband) directory.
    type: path
    default: /sys/class/infiniband
  processes:
    description: Regular expressions; the PIDs of the processes whose command line matches are recorded.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description:
      - nvidia-smi; the PIDs of the processes holding the GPU (its compute apps) are recorded.
        Omitted, they are not looked at.
    type: str
  urls:
    description: URLs that must answer HTTP 200 within O(url_timeout) seconds at each check.
    type: list
    elements: str
    default: []
  url_timeout:
    description: Seconds each URL (and Ray's dashboard, and the Hub) has to answer.
    type: int
    default: 5
  api_key:
    description: Sent as a Bearer token with each of O(urls) and the smoke test (vLLM's C(/v1) paths want it when it has a key). Never logged or recorded.
    type: str
  hub_manifests:
    description:
      - The results of M(laguna.spark.hf_repo_manifest) for each checkpoint
        staged in this run (the staging role's C(staging_hubs.results)); the
        repo, revision and commit of each are recorded with O(state=record).
      - Each check then asks the Hub (E(HF_ENDPOINT), else huggingface.co,
        with E(HF_TOKEN), from the staging role's environment) which commit each
        revision is on now, within O(url_timeout) seconds, as the staging role
        does; a branch or tag that moved is not converged. A revision that is
        its own commit is not asked.
    type: list
    elements: dict
    default: []
  ray_dashboard:
    description:
      - Ray's dashboard on the head (C(http://127.0.0.1:8265)); with O(state=record)
        the host names of the nodes Ray lists as alive are recorded
        (C(GET /nodes?view=hostNameList), with the token of O(ray_token_path)),
        and each check reads them again. A worker Ray no longer lists while
        its raylet unit stays active is not converged. A dashboard that does
        not answer at O(state=record) leaves no record.
    type: str
  ray_token_path:
    description: The cluster's Ray token file, sent to O(ray_dashboard) as a Bearer token. Never logged or recorded.
    type: path
  ray_nodes:
    description:
      - How many nodes Ray must list as alive when O(state=record) records
        them (the cluster's hosts); it asks again every second for up to 60
        seconds (Ray's dashboard learns of a node that joined a few seconds
        after C(ray status) lists it), then records nothing if fewer are listed.
    type: int
  api_url:
    description:
      - The vLLM server that O(smoke) asks (the head's, C(laguna_api_url)).
      - Required with O(smoke).
    type: str
  tree_limit:
    description: Most entries a tree may hold (a bound on the scan).
    type: int
    default: 100000
notes:
  - O(units), O(trees), O(paths), O(reads), O(netdevs), O(hcas), O(processes), O(nvidia_smi),
    O(urls), O(api_url), O(smoke), O(hub_manifests), O(ray_dashboard) and O(ray_token_path) are used with
    O(state=record); a check reads them from the record.
  - A check names every difference it finds, the Hub's, the URLs' and the smoke test's included
    (the smoke test runs once every URL answered).
  - The record is the collection's memory of its own last verification, not
    a setting of the node, so writing it does not report a change.
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Is the cluster as the last complete run left it?
  laguna.spark.converged:
    inputs:
      variables: "{{ dict(names | zip(query('ansible.builtin.vars', *names))) }}"
  vars:
    names: "{{ query('ansible.builtin.varnames', '^laguna_') }}"
  become: true
  become_user: spark
  register: laguna_converged

- name: Record what this run left
  laguna.spark.converged:
    state: record
    fingerprint: "{{ laguna_converged.fingerprint }}"
    units: [laguna-ray-head, laguna-vllm]
    trees: [/home/spark/models/hf/Laguna-S-2.1-FP8]
    urls: [http://127.0.0.1:8000/v1/models]
    api_url: http://127.0.0.1:8000
    smoke:
      model: laguna-s-2.1
      prompt: capital of France? one word
      expect: Paris
  become: true
  become_user: spark
"""

RETURN = r"""
converged:
  description: True when the inputs, every piece of recorded evidence and every URL agree with the record.
  returned: always
  type: bool
reasons:
  description: One sentence per difference (empty when converged).
  returned: always
  type: list
  elements: str
  sample: ["unit laguna-vllm.service changed (ActiveState active -> failed, MainPID 4242 -> 0)"]
fingerprint:
  description: sha256 of O(inputs) (with O(state=record), O(fingerprint)).
  returned: always
  type: str
digests:
  description: sha256 of each part of O(inputs), each variable on its own (O(state=check)).
  returned: always
  type: dict
  sample: {"collection": "9f86d0...", "variable vllm_serve_max_num_seqs": "d4735e..."}
path:
  description: The record file.
  returned: always
  type: str
recorded:
  description: Whether O(state=record) wrote the record (false in check mode).
  returned: always
  type: bool
"""

import json
import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import (converged, files, gpu_procs, model_stage, ray_status,
                                                                   vllm_health)
from ansible_collections.laguna.spark.plugins.module_utils.systemd_user import UserUnits, unit_name
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

SPEC_KEYS = ("units", "trees", "paths", "reads", "processes", "nvidia_smi", "urls", "tree_limit", "api_url", "smoke",
             "ray_dashboard", "ray_token_path")


def default_path():
    return os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".local", "state", "laguna-spark", "converged.json")


def unit_reader(module):
    users = UserUnits(module)

    def read(name):
        props, error = users.show(unit_name(name), converged.UNIT_PROPERTIES)
        return props if error is None else {"error": error}

    return read


def gpu_reader(module):
    def read(smi):
        found, error = gpu_procs.query(module.run_command, smi, 30)
        return {"error": error} if error else sorted(p["pid"] for p in found)

    return read


def probe_urls(urls, timeout, api_key=None):
    reasons = []
    for url in urls:
        state, _status, seconds, detail = vllm_health.probe(url, timeout, api_key=api_key)
        if state != vllm_health.HEALTHY:
            reasons.append("%s did not answer within %d s (%s after %.1f s)" % (url, timeout, detail, seconds))
    return reasons


RAY_RECORD_WAIT = 60


def ray_reader(spec, timeout, nodes=None):
    """The reader of the nodes Ray lists as alive (converged.gather's ``ray``),
    with the spec's token; with ``nodes`` (recording), it waits for that many."""
    def read(url):
        token = files.read_text(spec["ray_token_path"], strip=True) if spec.get("ray_token_path") else None
        try:
            if nodes:
                hosts = ray_status.wait_alive_hosts(url, token, nodes, RAY_RECORD_WAIT, timeout=timeout)
                if len(hosts) < nodes:
                    return {"error": "Ray lists %d of %d nodes (%s) after %d s" % (
                        len(hosts), nodes, ", ".join(hosts) or "none", RAY_RECORD_WAIT)}
                return hosts
            return ray_status.alive_hosts(url, token, timeout=timeout)
        except Exception as exc:  # refused, 401, not JSON: the nodes are unknown
            return {"error": "%s: %s" % (url, exc)}

    return read


def probe_smoke(spec, timeout, api_key=None):
    """The smoke test of the record's spec (none: no reason), as the verification runs it."""
    smoke = spec.get("smoke")
    if not smoke or not spec.get("api_url"):
        return []
    found = vllm_health.smoke(spec["api_url"], smoke["model"], smoke["prompt"], smoke.get("max_tokens") or 8,
                              smoke.get("expect") or "", timeout, api_key=api_key)
    return [] if found["ok"] else [found["message"]]


def probe_hub(spec, timeout):
    """The staged revisions of the record's spec that moved on the Hub (as the staging role asks it)."""
    if not spec.get("hub"):
        return []
    endpoint, fetch = model_stage.hub_fetcher(timeout=timeout)
    return model_stage.moved_revisions(spec["hub"], fetch, endpoint)


def write(module, path, record):
    files.write_atomic(module, path, json.dumps(record, sort_keys=True), dir_mode=0o700, prefix=".converged.")


def main():
    module = new_module(dict(
        state=dict(type="str", choices=["check", "record"], default="check"),
        path=dict(type="path"),
        inputs=dict(type="dict", required=False),
        fingerprint=dict(type="str"),
        digests=dict(type="dict"),
        units=dict(type="list", elements="str", default=[]),
        trees=dict(type="list", elements="str", default=[]),
        paths=dict(type="list", elements="str", default=[]),
        reads=dict(type="list", elements="str", default=[]),
        netdevs=dict(type="list", elements="str", default=[]),
        sysfs_net=dict(type="path", default="/sys/class/net"),
        hcas=dict(type="list", elements="str", default=[]),
        hca_port=dict(type="int", default=1),
        sysfs_infiniband=dict(type="path", default="/sys/class/infiniband"),
        processes=dict(type="list", elements="str", default=[]),
        nvidia_smi=dict(type="str"),
        urls=dict(type="list", elements="str", default=[]),
        url_timeout=dict(type="int", default=5),
        api_key=dict(type="str", no_log=True),
        hub_manifests=dict(type="list", elements="dict", default=[]),
        api_url=dict(type="str"),
        smoke=vllm_health.SMOKE_OPTIONS,
        ray_dashboard=dict(type="str"),
        ray_token_path=dict(type="path", no_log=False),
        ray_nodes=dict(type="int"),
        tree_limit=dict(type="int", default=100000),
    ), required_if=[("state", "check", ["inputs"]), ("state", "record", ["fingerprint"])],
        required_by={"smoke": "api_url"})
    p = module.params
    path = p["path"] or default_path()
    fingerprint = p["fingerprint"] if p["state"] == "record" else converged.fingerprint(p["inputs"])
    inputs_digests = p["digests"] if p["state"] == "record" else converged.digests(p["inputs"])
    result = dict(changed=False, converged=False, reasons=[], fingerprint=fingerprint, path=path,
                  recorded=False, digests=inputs_digests or {})
    exclude = (os.getpid(), os.getppid())
    if p["state"] == "record":
        spec = dict((key, p[key]) for key in SPEC_KEYS)
        spec["reads"] = p["reads"] + converged.netdev_reads(p["sysfs_net"], p["netdevs"])
        spec["gid_tables"] = [dict(sysfs_root=p["sysfs_infiniband"], hca=hca, port=p["hca_port"]) for hca in p["hcas"]]
        spec["hub"] = model_stage.staged_revisions(p["hub_manifests"])
        try:
            evidence = converged.gather(spec, units=unit_reader(module), exclude=exclude, gpu=gpu_reader(module),
                                        ray=ray_reader(spec, p["url_timeout"], p["ray_nodes"]))
        except ValueError as exc:
            module.fail_json(msg="Cannot record the converged state: %s" % exc, **result)
        result["reasons"] = converged.not_running(evidence) + converged.unreadable(evidence)
        if result["reasons"]:
            # A unit that is not running, or evidence not read, is not a state worth coming back to.
            module.exit_json(**result)
        if not module.check_mode:
            write(module, path, converged.make_record(fingerprint, spec, evidence, inputs_digests))
            result["recorded"] = True
        result["converged"] = True
        module.exit_json(**result)
    record = converged.load(path)
    reasons = converged.stale(record, fingerprint, inputs_digests)
    if not reasons:  # only then is the evidence worth reading
        spec = record.get("spec") or {}
        try:
            now = converged.gather(spec, units=unit_reader(module), exclude=exclude, gpu=gpu_reader(module),
                                   ray=ray_reader(spec, p["url_timeout"]))
        except ValueError as exc:
            now = {"error": str(exc)}
        # Every difference is named: the evidence's, the Hub's, the API's.
        reasons = converged.check(record, fingerprint, now)[1] + probe_hub(spec, p["url_timeout"])
        unanswered = probe_urls(spec.get("urls") or [], p["url_timeout"], p["api_key"])
        reasons += unanswered or probe_smoke(spec, p["url_timeout"], p["api_key"])
    result.update(converged=not reasons, reasons=reasons)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
