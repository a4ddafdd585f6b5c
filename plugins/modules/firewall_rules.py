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
  - With O(unit), the system unit that loads O(path) at every boot too. Its file (O(unit.dir)/O(unit.name),
    mode 0644, owner root) is written only when it differs, C(systemctl daemon-reload) runs only when the file
    changed, and C(systemctl enable) only when C(systemctl is-enabled) says the unit is not enabled. The unit
    is not started (the module loads the table itself). Every read (the live table, both files, C(is-enabled))
    comes before any change.
  - O(state=absent) deletes the live table and removes the file.
attributes:
  check_mode:
    support: full
    description:
      - Says whether the file would be written and the table loaded or deleted, and with O(unit) whether the
        unit file would be written, systemd reloaded and the unit enabled (also when its file is not there yet);
        changes nothing.
  diff_mode:
    support: full
    description: The rules file's text before and after, and with O(unit) the unit file's (a list of both when both differ).
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
  unit:
    description:
      - The system unit that loads O(path) at boot (the firewall role's C(firewall_unit)). Its text is fixed
        (C(After=nftables.service), C(Before=network-pre.target), C(ExecStart=<nft> -f <path>),
        C(ExecStop=-<nft> delete table inet <table>), C(WantedBy=multi-user.target)).
      - Unset, the module leaves units alone. Ignored with O(state=absent) (the teardown role disables and
        removes the unit itself).
    type: dict
    suboptions:
      name:
        description: The unit's name, ending in C(.service).
        type: str
        required: true
      dir:
        description: The directory of its file.
        type: path
        default: /etc/systemd/system
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

- name: The same, and the unit that loads the table at boot
  laguna.spark.firewall_rules:
    ray_port: 6379
    ray_ports: {node_manager: 6380, object_manager: 6381, min_worker: 10002, max_worker: 19999}
    cluster:
      - {name: spark-1, addresses: [spark-1.local], roce_ip: 192.168.100.1}
    unit:
      name: laguna-spark-firewall.service
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
unit:
  description: The boot unit (O(unit)).
  returned: O(unit) is set and O(state=present)
  type: dict
  contains:
    name:
      description: The unit's name.
      type: str
      sample: laguna-spark-firewall.service
    path:
      description: Its file.
      type: str
      sample: /etc/systemd/system/laguna-spark-firewall.service
    file_changed:
      description: The file was (or would be) written, or its mode or owner set.
      type: bool
    daemon_reload:
      description: C(systemctl daemon-reload) ran (or would run).
      type: bool
    enabled:
      description: C(systemctl enable) ran (or would run).
      type: bool
    state:
      description: What C(systemctl is-enabled) said before the run (C(enabled), C(disabled), or its error).
      type: str
      sample: enabled
"""

import os
import re
import stat
import socket

from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.laguna.spark.plugins.module_utils import files, firewall
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

MODE = 0o644
# The unit file's owner (uid, gid); a unit test run by another user sets its own.
UNIT_OWNER = firewall.UNIT_OWNER
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.service$")


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


def _unit_file(path):
    """(text or None, (mode, uid, gid) or None) of the unit file; a symlink or anything
    but a regular file reads as no text (the file is written in its place)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None, None
    text = _read(path) if stat.S_ISREG(st.st_mode) else None
    return text, (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


class Unit(object):
    """The boot unit (option unit): read by probe(), changed by apply()."""

    def __init__(self, module, nft, node):
        spec = module.params["unit"]
        self.module, self.name = module, spec["name"]
        if not UNIT_NAME_RE.match(self.name):
            module.fail_json(msg="unit.name %r: a unit name ending in .service (laguna-spark-firewall.service)"
                             % self.name)
        self.systemctl = module.get_bin_path("systemctl")
        if not self.systemctl:
            module.fail_json(msg="systemctl not found on %s: the unit %s that loads the firewall at boot needs "
                                 "systemd; leave unit unset (the table is loaded all the same, but not at boot)"
                                 % (node, self.name))
        self.path = os.path.join(spec["dir"], self.name)
        self.text = firewall.unit_text(nft, module.params["path"], module.params["table"])
        self.before = None
        self.plan = None
        self.write_text = False

    def probe(self):
        """Read the file and `systemctl is-enabled`; the result's unit dict."""
        self.before, attributes = _unit_file(self.path)
        file_state = firewall.unit_file_state(self.before, attributes, self.text, UNIT_OWNER)
        enabled, state = firewall.read_enabled(self.module.run_command, self.systemctl, self.name)
        self.plan = firewall.unit_plan(file_state, enabled)
        self.write_text = file_state["write"]
        return dict(name=self.name, path=self.path, file_changed=self.plan["file_changed"],
                    daemon_reload=self.plan["daemon_reload"], enabled=self.plan["enable"], state=state)

    def diff(self):
        return dict(before=self.before or "", after=self.text, before_header=self.path, after_header=self.path)

    def write(self):
        if self.write_text:
            files.write_atomic(self.module, self.path, to_bytes(self.text, errors="surrogate_or_strict"),
                               mode=MODE, dir_mode=0o755)
        os.chown(self.path, *UNIT_OWNER)  # atomic_move keeps an old file's owner
        os.chmod(self.path, MODE)

    def apply(self):
        """Carry the plan out; True when the unit was enabled by it."""
        enabled, error = firewall.apply_unit(self.module.run_command, self.systemctl, self.name, self.plan,
                                             self.write)
        if error:
            self.module.fail_json(msg=error)
        return enabled


def present(module, nft, node):
    p = module.params
    try:
        ports = (firewall.ray_ports(p["ray_port"], p["ray_ports"]) + list(p["guarded_ports"])
                 + firewall.monitoring_ports(p["monitoring"], p["monitoring_ports"]))
        cluster = firewall.cluster_sources(p["cluster"], p["roce_prefix"])
        wanted = firewall.render(p["table"], ports, cluster, p["extra_sources"], p["api_port"], p["api_sources"])
    except ValueError as exc:
        module.fail_json(msg="%s on %s" % (exc, node))
    unit = Unit(module, nft, node) if p["unit"] else None
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
    diffs = []
    if file_changed:
        diffs.append(dict(before=before or "", after=wanted["text"], before_header=path, after_header=path))
    if unit:
        result["unit"] = unit.probe()
        result["changed"] = result["changed"] or result["unit"]["file_changed"] or result["unit"]["enabled"]
        if result["unit"]["file_changed"]:
            diffs.append(unit.diff())
    if diffs and module._diff:
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    if module.check_mode:
        module.exit_json(**result)
    if file_changed:
        if before == wanted["text"]:
            os.chmod(path, MODE)
        else:
            _write(module, nft, path, wanted["text"])
    if not current:
        _run(module, [nft, "-f", path], "%s -f %s" % (nft, path))
    if unit:
        result["unit"]["enabled"] = unit.apply()
        result["changed"] = result["changed"] or result["unit"]["enabled"]
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
        unit=dict(type="dict", options=dict(
            name=dict(type="str", required=True),
            dir=dict(type="path", default=firewall.UNIT_DIR),
        )),
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
