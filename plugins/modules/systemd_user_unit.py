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
  runtime_dir:
    description: The user's C(XDG_RUNTIME_DIR). Defaults to C(/run/user/<uid>).
    type: path
attributes:
  check_mode:
    support: full
    description: Predicts the action and the state after it; runs only C(systemctl --user show).
  diff_mode:
    support: full
    description: Shows the unit's ActiveState before and after.
  platform:
    support: full
    platforms: posix
    description: Needs systemd with a user manager (lingering or a login session).
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
  description: Whether ActiveState is active, activating or reloading.
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
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import systemd_user as su


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "stopped", "restarted"]),
            properties=dict(type="list", elements="str", default=[]),
            runtime_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    unit = su.unit_name(params["name"])
    wanted = tuple(dict.fromkeys(list(su.DEFAULT_PROPERTIES) + list(params["properties"])))
    units = su.UserUnits(module, params["runtime_dir"])

    if params["state"] is None:
        props, error = units.show(unit, wanted)
        result = su.summarize(unit, props, manager=error is None)
        if error is not None:
            result["user_manager_error"] = error
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
    if module._diff:
        result["diff"] = {"before": "ActiveState=%s\n" % before.get("ActiveState", "inactive"),
                          "after": "ActiveState=%s\n" % after.get("ActiveState", "inactive"),
                          "before_header": unit, "after_header": unit}
    module.exit_json(changed=action != "none", action=action, **result)


if __name__ == "__main__":
    main()
