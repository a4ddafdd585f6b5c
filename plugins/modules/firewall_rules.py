#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: firewall_rules
short_description: Ray's ports reachable only from the cluster's own nodes (one nftables table)
version_added: "0.3.0"
description:
  - Renders one nftables table, C(inet <table>), writes it to O(path) and loads it with C(nft -f).
    Its one chain hooks input at C(priority filter - 5) with C(policy accept); it accepts loopback
    and replies to the node's own connections, accepts the guarded TCP ports from the cluster's
    addresses and O(extra_sources), and answers them with a TCP reset from anywhere else. With
    O(api_sources), the same for O(api_port).
  - The table only refuses. What it accepts still goes through every other table's chains (ufw's, the
    user's), so it never admits what they refuse; it never flushes the ruleset nor touches another table.
    UDP and every port not guarded (SSH, NCCL's and Gloo's ephemeral ports) are left alone.
  - The script first declares the table, then deletes it, then defines it, so C(nft -f) replaces it
    atomically whether or not it existed. The table's comment (and its first rule's, which nft before
    1.0.8 shows in JSON when it does not show the table's) is C(laguna-spark) and a short sha256 of the
    script; the live table (C(nft -j list table)) is current when that comment and its number of rules
    match. The file is written only when it differs (checked with C(nft --check) first), the table
    loaded only when the live one is not current.
  - Host names in O(cluster) are resolved on the node; one that does not resolve fails, naming the host.
  - O(state=absent) deletes the live table and removes the file.
attributes:
  check_mode:
    support: full
    description: Says whether the file would be written and the table loaded or deleted; changes nothing.
  diff_mode:
    support: full
    description: The file's text before and after.
  platform:
    support: full
    platforms: linux
    description: Linux with nftables (C(nft)); Ubuntu 24.04 (DGX OS), Debian bookworm.
options:
  state:
    description: C(present) writes and loads the table; C(absent) deletes it and removes the file.
    type: str
    choices: [present, absent]
    default: present
  table:
    description: The table's name (family C(inet)).
    type: str
    default: laguna_spark
  path:
    description: The nft script, loaded at boot by C(laguna-spark-firewall.service).
    type: path
    default: /etc/laguna-spark/firewall.nft
  nft:
    description: The nft executable (a name looked up on PATH, or a path).
    type: str
    default: nft
  guarded_ports:
    description: TCP ports (C("6379")) and ranges (C("10002-19999")) to guard, beside O(ray_port) and O(ray_ports).
    type: list
    elements: str
    default: []
  monitoring:
    description: Whether the monitoring role runs (C(laguna_monitoring)); only then are O(monitoring_ports) guarded.
    type: bool
    default: false
  monitoring_ports:
    description:
      - The monitoring role's ports (C(laguna_monitoring_ports)) by name, the node exporter's and
        Prometheus's; guarded like Ray's when O(monitoring) is true.
    type: dict
    default: {}
  ray_port:
    description: Ray's GCS port (C(laguna_ray_port)), guarded.
    type: int
  ray_ports:
    description:
      - Every other port Ray listens on (C(laguna_ray_ports)), by name; each value is guarded, and
        C(min_worker)..C(max_worker) as one range.
    type: dict
    default: {}
  cluster:
    description: The cluster's nodes; their addresses are admitted to the guarded ports.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The node's name in messages (the inventory name).
        type: str
        required: true
      addresses:
        description: Its IPv4 or IPv6 addresses, CIDRs or host names (its management address, C(ansible_host)).
        type: list
        elements: str
        default: []
      roce_ip:
        description: Its address on the RoCE link (C(laguna_roce_ip)); its twins' addresses are admitted too.
        type: str
      roce_prefix:
        description: The prefix length of its twins' subnets (C(fabric_prefix)); O(roce_prefix) when unset.
        type: int
      twin_addresses:
        description:
          - Its address per twin (C(fabric_twin_addresses)). Empty, the Spark's two twins get the RoCE
            address and the same address one subnet on, as the fabric role plans them.
        type: list
        elements: str
        default: []
  roce_prefix:
    description: The default prefix length of the twins' subnets.
    type: int
    default: 24
  extra_sources:
    description: Further IPv4 or IPv6 addresses or CIDRs admitted to the guarded ports.
    type: list
    elements: str
    default: []
  api_port:
    description: The API's TCP port. Guarded only when O(api_sources) is not empty.
    type: int
  api_sources:
    description:
      - Addresses or CIDRs admitted to O(api_port), beside the cluster's addresses and loopback.
        Empty, the API port is left open to everyone (guarded by the API key).
    type: list
    elements: str
    default: []
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Ray's ports from the cluster's nodes only
  laguna.spark.firewall_rules:
    ray_port: 6379
    ray_ports: {node_manager: 6380, object_manager: 6381, min_worker: 10002, max_worker: 19999}
    cluster:
      - {name: spark-1, addresses: [spark-1.local], roce_ip: 192.168.100.1}
      - {name: spark-2, addresses: [spark-2.local], roce_ip: 192.168.100.2}
    api_port: 8000
    api_sources: [10.0.0.0/24]
  become: true

- name: Remove the table and its file
  laguna.spark.firewall_rules:
    state: absent
  become: true
"""

RETURN = r"""
rules:
  description: The nft script (the file's text).
  returned: state=present
  type: str
digest:
  description: The first 16 hex digits of the script's sha256, in the table's comment (C(laguna-spark DIGEST)).
  returned: state=present
  type: str
  sample: 5f0c2b7e91d4a836
file_changed:
  description: The file was (or, in check mode, would be) written or removed.
  returned: always
  type: bool
loaded:
  description: The table was (or would be) loaded with C(nft -f).
  returned: always
  type: bool
deleted:
  description: The live table was (or would be) deleted (O(state=absent)).
  returned: always
  type: bool
live:
  description: The live table before the run; C(absent), C(current) or C(stale).
  returned: always
  type: str
nft:
  description: The nft executable used (a full path), or "" when there is none (O(state=absent) only).
  returned: always
  type: str
  sample: /usr/sbin/nft
ports:
  description: The guarded ports and ranges, merged and sorted.
  returned: state=present
  type: list
  elements: str
  sample: ["6379", "6380", "6381", "8265", "10001", "10002-19999"]
sources:
  description: The addresses and CIDRs admitted to the guarded ports (the cluster's and O(extra_sources)).
  returned: state=present
  type: list
  elements: str
api_sources:
  description: The addresses and CIDRs admitted to O(api_port) (empty when the API port is not guarded).
  returned: state=present
  type: list
  elements: str
"""

import os
import socket

from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.laguna.spark.plugins.module_utils import files, firewall
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

MODE = 0o644


def _read(path):
    """The rules file as to_text(errors="surrogate_or_strict") gives it, or None."""
    return files.read_text(path, encoding="utf-8", errors="surrogateescape", newline="")


def _nft(module):
    """The nft executable's full path, or None."""
    name = module.params["nft"]
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    return module.get_bin_path(name)


def _run(module, argv, what):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg="%s failed (rc=%d): %s" % (what, rc, (err or out).strip()[-2000:]), cmd=argv)


def _write(module, nft, path, text):
    """Check the script with `nft --check`, then put it in place (files.write_atomic)."""
    def check(tmp):
        rc, out, err = module.run_command([nft, "--check", "-f", tmp])
        if rc != 0:
            module.fail_json(msg="nft --check refuses the rules for %s (rc=%d): %s" % (path, rc, (err or out).strip()[-2000:]))

    directory = os.path.dirname(path)
    if directory:
        files.make_dir(directory, 0o755, exact=True)
    files.write_atomic(module, path, to_bytes(text, errors="surrogate_or_strict"), mode=MODE, suffix=".nft", check=check)


def present(module, nft, node):
    p = module.params
    try:
        ports = (firewall.ray_ports(p["ray_port"], p["ray_ports"]) + list(p["guarded_ports"])
                 + firewall.monitoring_ports(p["monitoring"], p["monitoring_ports"]))
        cluster = firewall.cluster_sources(p["cluster"], p["roce_prefix"])
        wanted = firewall.render(p["table"], ports, cluster, p["extra_sources"], p["api_port"], p["api_sources"])
    except ValueError as exc:
        module.fail_json(msg="%s on %s" % (exc, node))
    live, error = firewall.read_live(module.run_command, nft, p["table"])
    if error:
        module.fail_json(msg=error)
    path = p["path"]
    before = _read(path)
    file_changed = before != wanted["text"] or files.file_mode(path) != MODE
    current = firewall.is_current(live, wanted)
    result = dict(changed=file_changed or not current, rules=wanted["text"], digest=wanted["digest"],
                  file_changed=file_changed, loaded=not current, deleted=False, nft=nft,
                  live="current" if current else ("stale" if live["present"] else "absent"),
                  ports=wanted["ports"], sources=wanted["sources"], api_sources=wanted["api_sources"])
    if file_changed and module._diff:
        result["diff"] = dict(before=before or "", after=wanted["text"], before_header=path, after_header=path)
    if module.check_mode:
        module.exit_json(**result)
    if file_changed:
        if before == wanted["text"]:
            os.chmod(path, MODE)
        else:
            _write(module, nft, path, wanted["text"])
    if not current:
        _run(module, [nft, "-f", path], "%s -f %s" % (nft, path))
    module.exit_json(**result)


def absent(module, nft):
    p = module.params
    path = p["path"]
    live = dict(present=False)
    if nft:
        live, error = firewall.read_live(module.run_command, nft, p["table"])
        if error:
            module.fail_json(msg=error)
    before = _read(path)
    file_changed = os.path.lexists(path)
    result = dict(changed=live["present"] or file_changed, file_changed=file_changed, loaded=False,
                  deleted=live["present"], nft=nft or "", live="stale" if live["present"] else "absent")
    if file_changed and module._diff:
        result["diff"] = dict(before=before or "", after="", before_header=path, after_header=path)
    if module.check_mode:
        module.exit_json(**result)
    if live["present"]:
        _run(module, [nft, "delete", "table", "inet", p["table"]], "%s delete table inet %s" % (nft, p["table"]))
    if file_changed:
        os.unlink(path)
    module.exit_json(**result)


def main():
    module = new_module(dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        table=dict(type="str", default="laguna_spark"),
        path=dict(type="path", default="/etc/laguna-spark/firewall.nft"),
        nft=dict(type="str", default="nft"),
        guarded_ports=dict(type="list", elements="str", default=[]),
        monitoring=dict(type="bool", default=False),
        monitoring_ports=dict(type="dict", default={}),
        ray_port=dict(type="int"),
        ray_ports=dict(type="dict", default={}),
        cluster=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            addresses=dict(type="list", elements="str", default=[]),
            roce_ip=dict(type="str"),
            roce_prefix=dict(type="int"),
            twin_addresses=dict(type="list", elements="str", default=[]),
        )),
        roce_prefix=dict(type="int", default=24),
        extra_sources=dict(type="list", elements="str", default=[]),
        api_port=dict(type="int"),
        api_sources=dict(type="list", elements="str", default=[]),
    ))
    node = socket.gethostname()
    if not firewall.TABLE_RE.match(module.params["table"]):
        module.fail_json(msg="table %r: a letter, then letters, digits or _ (at most 64)" % module.params["table"])
    nft = _nft(module)
    if module.params["state"] == "absent":
        absent(module, nft)
    if not nft:
        module.fail_json(msg=firewall.missing_nft(module.params["nft"], node))
    present(module, nft, node)


if __name__ == "__main__":
    main()
