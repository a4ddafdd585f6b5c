#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_user_unit
short_description: Report a C(systemctl --user) unit's state and start, stop or restart it
version_added: "0.1.0"
description:
  - Reads a unit of the calling user's systemd manager (C(systemctl --user show))
    and reports its state, main process, exit status, environment and the
    properties asked for.
  - With O(state), also starts, stops or restarts the unit, and reports its state afterwards.
  - Without O(state) it only reads, never fails because the user manager is
    missing (RV(user_manager=false)), and is safe in check mode.
  - With O(expect_command), O(expect_environment) or O(expect_properties),
    also compares what runs with what is expected and reports each
    difference (RV(differences), RV(problems)); a unit that does not run
    gives a single V(state) difference.
  - Run it as the unit's user (C(become_user)).
options:
  name:
    description: Unit name; C(.service) is appended unless it names a unit type.
    type: str
    required: true
  state:
    description:
      - V(started) starts the unit unless it is running; V(restarted) restarts
        (or starts) it; V(stopped) stops it and clears a failed state.
      - Omitted, the unit is only reported.
    type: str
    choices: [started, stopped, restarted]
  properties:
    description: Further properties to read, in addition to the ones always reported.
    type: list
    elements: str
    default: []
  expect_command:
    description:
      - The argv the unit should run, compared with its C(ExecStart) property.
      - C(systemctl show) prints the arguments joined by spaces, unquoted;
        an expected argument that holds spaces matches where the text holds it.
      - The first differing argument is reported (V(argv[N])), and a
        different count (V(argc)).
    type: list
    elements: str
  expect_environment:
    description:
      - The environment the unit should have, compared with its
        C(Environment) property. Values compare as text.
      - A variable that is missing or different is reported, and so is one
        the unit has that is not expected (want V("")).
    type: dict
  expect_properties:
    description:
      - Unit properties and the values they should have, for example
        C(MemoryMax) V(98G) and C(LimitMEMLOCK) V(infinity).
      - Memory* and Limit* values compare as sizes, as systemd parses them
        (V(98G) equals C(systemctl show)'s V(105226698752)); booleans as
        systemd parses them; anything else as text.
    type: dict
  process_environment_keys:
    description:
      - Variables whose value is read from the running main process
        (C(/proc/<MainPID>/environ)) rather than the C(Environment) property,
        for values a unit gets at start from an C(EnvironmentFile) (a
        persistent raylet's RoCE GID index, see
        M(laguna.spark.systemd_run_service)'s O(laguna.spark.systemd_run_service#module:start_env_keys)).
    type: list
    elements: str
    default: []
  host:
    description: The node's name in the sentences of RV(problems) (C(inventory_hostname)).
    type: str
  fix_hint:
    description:
      - What fixes a difference, ending each sentence of RV(problems) as
        C(rerun <fix_hint>.), for example V(--tags vllm_serve).
    type: str
attributes:
  check_mode:
    support: full
    description: Predicts the action and the state after it; runs only C(systemctl --user show).
  diff_mode:
    support: full
    description: Shows the unit's ActiveState before and after.
extends_documentation_fragment: [laguna.spark.systemd_user]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the raylet unit's state
  laguna.spark.systemd_user_unit:
    name: laguna-ray-head
  become: true
  become_user: spark
  register: raylet

- name: Fail unless it runs
  ansible.builtin.assert:
    that: raylet.running
    fail_msg: "{{ raylet.unit }} is {{ raylet.active_state }} ({{ raylet.result }}, exit status {{ raylet.exec_main_status }})"

- name: Compare the raylet with what the inventory renders
  laguna.spark.systemd_user_unit:
    name: "{{ ray_cluster_render.unit }}"
    expect_command: "{{ ray_cluster_render.argv }}"
    expect_environment: "{{ ray_cluster_render.environment }}"
    expect_properties: "{{ ray_cluster_render.properties }}"
    host: "{{ inventory_hostname }}"
    fix_hint: --tags ray_cluster,vllm_serve
  become: true
  become_user: spark
  register: raylet_drift

- name: Fail on any difference
  ansible.builtin.assert:
    that: raylet_drift.matches
    fail_msg: "{{ raylet_drift.problems | join(' ') }}"

- name: Stop vLLM
  laguna.spark.systemd_user_unit:
    name: laguna-vllm
    state: stopped
  become: true
  become_user: spark
"""

RETURN = r"""
unit:
  description: Full unit name.
  returned: always
  type: str
  sample: laguna-ray-head.service
user_manager:
  description: Whether the user's systemd manager answered. When false the state values are V(unknown).
  returned: always
  type: bool
user_manager_error:
  description: What C(systemctl --user) said when the manager did not answer.
  returned: when user_manager is false
  type: str
exists:
  description: Whether the unit is known to the manager (LoadState is not V(not-found)).
  returned: always
  type: bool
load_state:
  description: LoadState after the run.
  returned: always
  type: str
  sample: loaded
active_state:
  description: ActiveState after the run (predicted in check mode).
  returned: always
  type: str
  sample: active
sub_state:
  description: SubState after the run.
  returned: always
  type: str
  sample: running
result:
  description: Result of the unit's last run (V(success), V(exit-code), V(signal), ...).
  returned: always
  type: str
  sample: success
main_pid:
  description: Main PID (0 when not running).
  returned: always
  type: int
  sample: 4242
exec_main_status:
  description: Exit status of the main process of the last run.
  returned: always
  type: int
  sample: 0
running:
  description:
    - Whether ActiveState is active, activating or reloading, and the unit is not waiting to be restarted
      (RV(restarting)).
  returned: always
  type: bool
restarting:
  description:
    - Whether the unit's process exited and systemd will start it again by itself after C(RestartSec=)
      (C(Restart=), SubState C(auto-restart)).
  returned: always
  type: bool
description:
  description: The unit's Description.
  returned: always
  type: str
environment:
  description: The unit's Environment property as a dict.
  returned: always
  type: dict
  sample: {NCCL_IB_GID_INDEX: "3"}
properties:
  description: Every property read, as returned by C(systemctl show).
  returned: always
  type: dict
action:
  description: What was done, V(none), V(started), V(restarted) or V(stopped).
  returned: always
  type: str
  sample: none
command:
  description:
    - The unit's argv, from its C(ExecStart) property (split where
      O(expect_command) says an argument holds spaces).
    - Empty when the unit is not loaded.
  returned: when O(expect_command), O(expect_environment) or O(expect_properties) is given
  type: list
  elements: str
  sample: [/home/spark/venv/bin/ray, start, --block, --address=192.168.100.10:6379]
differences:
  description:
    - Each way the unit differs from the expectations, in the order command,
      environment, properties.
    - A unit that does not run gives only one, whose C(what) is V(state).
  returned: when O(expect_command), O(expect_environment) or O(expect_properties) is given
  type: list
  elements: dict
  contains:
    what:
      description: V(state), V(command), V(environment) or V(property).
      type: str
    name:
      description:
        - What differs, V(ActiveState) for the state, V(argv[N]) (the first
          differing argument) or V(argc) (the count) for the command, the
          variable's or the property's name.
      type: str
    want:
      description: The expected value, as text (empty for a variable or argument that is not expected).
      type: str
    have:
      description:
        - The unit's value, as C(systemctl show) gives it (sizes in bytes);
          empty for a variable or argument that is missing.
      type: str
    unit:
      description: The unit's full name.
      type: str
  sample:
    - {what: environment, name: NCCL_IB_GID_INDEX, want: "7", have: "3", unit: laguna-ray-worker.service}
matches:
  description: Whether RV(differences) is empty.
  returned: when O(expect_command), O(expect_environment) or O(expect_properties) is given
  type: bool
problems:
  description: One sentence per difference, naming the unit, O(host) and O(fix_hint).
  returned: when O(expect_command), O(expect_environment) or O(expect_properties) is given
  type: list
  elements: str
  sample:
    - >-
      laguna-ray-worker.service on laguna-worker: environment NCCL_IB_GID_INDEX is "3",
      the inventory wants "7": rerun --tags ray_cluster,vllm_serve.
"""

from ansible_collections.laguna.spark.plugins.module_utils import procs
from ansible_collections.laguna.spark.plugins.module_utils import systemd_user as su
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def compare(unit, props, params):
    """The expectation results: command, differences, matches, problems."""
    like = params["expect_command"]
    have = su.parse_environment(props.get("Environment"))
    running = procs.environment(props.get("MainPID")) if params["process_environment_keys"] else {}
    have.update((key, running[key]) for key in params["process_environment_keys"] if key in running)
    differences = su.drift(props, command=like, environment=params["expect_environment"],
                           properties=params["expect_properties"], have_environment=have)
    problems = su.describe(unit, differences, host=params["host"], fix_hint=params["fix_hint"],
                           environment=have, expected_environment=params["expect_environment"])
    return {"command": su.parse_exec_argv(props.get("ExecStart"), like=like),
            "differences": [dict(diff, unit=unit) for diff in differences],
            "matches": not differences,
            "problems": problems}


def main():
    module = new_module(dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["started", "stopped", "restarted"]),
        properties=dict(type="list", elements="str", default=[]),
        runtime_dir=dict(type="path"),
        expect_command=dict(type="list", elements="str"),
        expect_environment=dict(type="dict"),
        expect_properties=dict(type="dict"),
        host=dict(type="str"),
        fix_hint=dict(type="str"),
        process_environment_keys=dict(type="list", elements="str", default=[], no_log=False),
    ))
    params = module.params
    unit = su.unit_name(params["name"])
    expecting = any(params[key] is not None
                    for key in ("expect_command", "expect_environment", "expect_properties"))
    extra = list(params["properties"])
    if expecting:
        extra += ["ExecStart"] + [su.show_name(str(name)) for name in params["expect_properties"] or {}]
    wanted = tuple(dict.fromkeys(list(su.DEFAULT_PROPERTIES) + extra))
    units = su.UserUnits(module, params["runtime_dir"])

    if params["state"] is None:
        props, error = units.show(unit, wanted)
        result = su.summarize(unit, props, manager=error is None)
        if error is not None:
            result["user_manager_error"] = error
        if expecting:
            result.update(compare(unit, props, params))
        module.exit_json(changed=False, action="none", **result)

    before = units.show_or_fail(unit, wanted)
    action = su.decide(before, params["state"])
    if action in ("started", "restarted") and before.get("LoadState") == "not-found":
        module.fail_json(msg="%s is not loaded (a transient unit is gone once stopped): "
                             "start it with the module that creates it" % unit,
                         **su.summarize(unit, before))
    after = su.predict(before, action)
    if action != "none" and not module.check_mode:
        units.act(unit, action)
        after = units.show_or_fail(unit, wanted)
        if action != "stopped" and not su.is_running(after):
            module.fail_json(
                msg="%s did not stay up (%s/%s, exit status %s). Last log lines: %s"
                    % (unit, after.get("ActiveState"), after.get("Result"), after.get("ExecMainStatus"),
                       " | ".join(units.logs(unit)[-15:])),
                **su.summarize(unit, after))
    result = su.summarize(unit, after)
    if expecting:
        result.update(compare(unit, after, params))
    if module._diff:
        result["diff"] = {"before": "ActiveState=%s\n" % before.get("ActiveState", "inactive"),
                          "after": "ActiveState=%s\n" % after.get("ActiveState", "inactive"),
                          "before_header": unit, "after_header": unit}
    module.exit_json(changed=action != "none", action=action, **result)


if __name__ == "__main__":
    main()
