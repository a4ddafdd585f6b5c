#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: config_check
short_description: Check the laguna.spark variables of a host, and the cluster they describe
version_added: "0.1.0"
description:
  - Coerces every value in O(values) to the type its role declares in
    C(meta/argument_specs.yml) (given as O(specs)), with Ansible's own
    conversion, so C(-e k=6) (the string C("6")) passes and C(-e k=six) is
    refused. Ansible cannot write the coerced values back over extra vars, so
    they are only returned; the roles' consumers are typed themselves.
  - Checks each value's range or format (k >= 1, bytes > 0, ports, systemd
    memory sizes, absolute paths, IPv4 addresses, ...) from the collection's
    bounds table, and relations between values (the tensor-parallel size
    against the GPUs of the inventory, C(MemoryHigh) below C(MemoryMax)).
  - Reports every name in O(defined) that has one of the collection's
    prefixes but that nothing in the collection mentions (O(known)), with the
    closest known name. Such a variable would be ignored silently.
  - With O(cluster_hosts) or O(roce_ips), checks the inventory (one head,
    and a distinct IPv4 RoCE address for every node).
  - With O(running_unit), reads that C(systemd --user) unit of the service
    user (run the task as that user) and refuses a run that would restart a
    running vLLM with a smaller tensor-parallel size, unless O(allow_shrink).
  - Fails with one message naming each bad variable, its value and what is
    expected. Read-only.
  - Returns the account it ran as (RV(user)). Run as the service user, the
    task also proves that becoming that user works, and tells its uid and home.
attributes:
  check_mode:
    support: full
    description: Only reads; the same checks run in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
options:
  specs:
    description: Parsed C(meta/argument_specs.yml) files of the collection's roles.
    type: list
    elements: dict
    default: []
  values:
    description: The variables as the play sees them (only those that are defined).
    type: dict
    default: {}
  secrets:
    description:
      - The secret variables (C(laguna_secret_variables)) as the play sees them, checked
        like O(values) but never logged, returned or quoted in a message.
    type: dict
    default: {}
  defined:
    description: Names of all variables defined for the host.
    type: list
    elements: str
    default: []
  known:
    description:
      - Every variable name the collection mentions (in its roles and playbooks),
        besides the names in O(specs).
    type: list
    elements: str
    default: []
  unknown_variables:
    description: Whether an unknown variable with a collection prefix fails the task or only warns.
    type: str
    choices: [fail, warn]
    default: fail
  head_group:
    description: Name of the head group, for messages.
    type: str
    default: spark_head
  head_hosts:
    description: Hosts of the head group.
    type: list
    elements: str
  cluster_hosts:
    description: Every node of the cluster (the head first).
    type: list
    elements: str
  roce_ips:
    description: C(laguna_roce_ip) of the nodes that have one; a node of O(cluster_hosts) missing here has none.
    type: dict
  nodes:
    description: Number of nodes in the cluster.
    type: int
  gpus_per_node:
    description:
      - C(laguna_gpus_per_node) as the play sees it; taken from O(values) when
        unset there, 1 when unset in both. A value that is not an integer is
        reported with the other values rather than failing the module's own
        argument check.
    type: raw
  tensor_parallel_size:
    description:
      - The tensor-parallel size this run would use; O(nodes) times O(gpus_per_node) when unset.
    type: raw
  running_unit:
    description: The vLLM user unit to read the running tensor-parallel size from.
    type: str
  allow_shrink:
    description: Allow a run that restarts vLLM with fewer GPUs than it runs with now.
    type: bool
    default: false
  runtime_dir:
    description: The service user's C(XDG_RUNTIME_DIR); C(/run/user/<uid>) by default.
    type: path
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the argument specs and every name of the collection (lookup laguna.spark.config_sources)
  ansible.builtin.set_fact:
    laguna_config_sources: "{{ lookup('laguna.spark.config_sources', role_path ~ '/..', role_path ~ '/../../playbooks') }}"
  run_once: true

- name: Check the variables of this host
  laguna.spark.config_check:
    specs: "{{ laguna_config_sources.specs }}"
    values: "{{ dict(laguna_config_names | zip(query('ansible.builtin.vars', *laguna_config_names))) }}"
    defined: "{{ query('ansible.builtin.varnames', '.') }}"
    known: "{{ laguna_config_sources.known }}"
    head_hosts: "{{ groups['spark_head'] }}"
    roce_ips: "{{ dict(laguna_cluster_hosts | zip(laguna_cluster_hosts | map('extract', hostvars, 'laguna_roce_ip'))) }}"
    nodes: "{{ laguna_cluster_hosts | length }}"

- name: Refuse to shrink a running deployment
  laguna.spark.config_check:
    running_unit: laguna-vllm
    nodes: 1
    gpus_per_node: 1
  become: true
  become_user: spark
"""

RETURN = r"""
config:
  description: The checked values, coerced to their declared types.
  returned: always
  type: dict
  sample: {vllm_serve_num_speculative_tokens: 6, laguna_gpus_per_node: 1}
coerced:
  description: Names whose value had to be converted (for example strings from C(-e)).
  returned: always
  type: list
  elements: str
problems:
  description: Every problem found, one sentence each.
  returned: always
  type: list
  elements: str
unknown:
  description: Variables with a collection prefix that the collection does not know.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The variable.
      type: str
    suggestion:
      description: The closest known name, or null.
      type: str
running_tensor_parallel_size:
  description: Tensor-parallel size of the running vLLM unit, null when none runs or O(running_unit) is unset.
  returned: always
  type: int
planned_tensor_parallel_size:
  description: Tensor-parallel size of this run, null when O(nodes) is unset.
  returned: always
  type: int
user:
  description:
    - The account the module ran as (its passwd entry), which the roles run
      it as on purpose (the service user, C(laguna_user)); the role
      C(laguna.spark.laguna) takes the user's uid and home from it.
  returned: always
  type: dict
  contains:
    name:
      description: The user's name.
      type: str
    uid:
      description: The user's uid.
      type: int
    home:
      description: The user's home directory.
      type: str
  sample: {name: spark, uid: 1000, home: /home/spark}
"""

import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import config_check as cc
from ansible_collections.laguna.spark.plugins.module_utils import systemd_run as sr
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def read_unit(module, unit):
    runtime = module.params["runtime_dir"] or "/run/user/%d" % os.getuid()
    env = {"XDG_RUNTIME_DIR": runtime, "DBUS_SESSION_BUS_ADDRESS": "unix:path=%s/bus" % runtime}
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return {}
    if "." not in unit:
        unit += ".service"
    rc, out, err = module.run_command(
        [systemctl, "--user", "show", unit, "--property=ActiveState,Description,ExecStart"],
        environ_update=env)
    if rc != 0:  # no user manager yet: nothing of ours can be running
        return {}
    return sr.parse_show(out)


def main():
    module = new_module(dict(
        specs=dict(type="list", elements="dict", default=[]),
        values=dict(type="dict", default={}),
        secrets=dict(type="dict", default={}, no_log=True),
        defined=dict(type="list", elements="str", default=[]),
        known=dict(type="list", elements="str", default=[]),
        unknown_variables=dict(type="str", choices=["fail", "warn"], default="fail"),
        head_group=dict(type="str", default="spark_head"),
        head_hosts=dict(type="list", elements="str"),
        cluster_hosts=dict(type="list", elements="str"),
        roce_ips=dict(type="dict"),
        nodes=dict(type="int"),
        gpus_per_node=dict(type="raw"),
        tensor_parallel_size=dict(type="raw"),
        running_unit=dict(type="str"),
        allow_shrink=dict(type="bool", default=False),
        runtime_dir=dict(type="path"),
    ))
    p = module.params
    specs, problems = cc.merge_specs(p["specs"])
    config, coerced, value_problems = cc.check_values(specs, p["values"])
    problems += value_problems
    checked_secrets, _converted, secret_problems = cc.check_values(specs, p["secrets"], hidden=True)
    problems += secret_problems
    if p["running_unit"]:  # the head: vLLM's API is served there
        for text in cc.exposure_warnings(config, checked_secrets):
            module.warn(text)
    problems += cc.check_relations(config, p["nodes"])

    unknown = []
    if p["defined"]:
        unknown = cc.unknown_variables(p["defined"], set(specs) | set(p["known"]),
                                       candidates=set(specs) | set(p["known"]))
        texts = [cc.unknown_text(item) for item in unknown]
        if p["unknown_variables"] == "fail":
            problems += texts
        else:
            for text in texts:
                module.warn(text)

    if p["roce_ips"] is not None or p["cluster_hosts"] is not None:
        roce_ips = dict((host, None) for host in p["cluster_hosts"] or [])
        roce_ips.update(p["roce_ips"] or {})
        problems += cc.check_cluster(p["head_hosts"], p["head_group"], roce_ips)

    gpus = cc.as_int(p["gpus_per_node"], config.get("laguna_gpus_per_node", 1))
    planned = None
    if p["nodes"] and gpus:
        planned = cc.as_int(p["tensor_parallel_size"], None) or p["nodes"] * gpus
    running = None
    if p["running_unit"]:
        running = cc.running_tensor_parallel_size(read_unit(module, p["running_unit"]))
        problems += cc.check_shrink(running, planned, p["nodes"] or 0, gpus or 0,
                                    p["allow_shrink"], p["running_unit"], os.uname()[1])

    account = pwd.getpwuid(os.getuid())
    result = dict(changed=False, config=config, coerced=coerced, problems=problems, unknown=unknown,
                  running_tensor_parallel_size=running, planned_tensor_parallel_size=planned,
                  user=dict(name=account.pw_name, uid=account.pw_uid, home=account.pw_dir))
    if problems:
        module.fail_json(msg="Configuration refused, nothing was changed: " + " ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
