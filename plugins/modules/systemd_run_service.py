#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_run_service
short_description: Keep a C(systemd-run --user) transient service running with a given configuration
version_added: "0.1.0"
description:
  - Starts O(command) as a transient user service with C(systemd-run --user
    --unit NAME), passing O(environment) as C(--setenv) and O(properties) as
    C(--property) (for example C(LimitMEMLOCK), C(MemoryMax), C(MemorySwapMax)).
  - The unit's description records a fingerprint of the configuration. When
    the unit is already active with the same fingerprint nothing is done; a
    different fingerprint (a changed command, environment or property) or an
    inactive/failed unit makes it (re)start.
  - Run it as the service user (C(become_user)); the user needs lingering
    (see the C(linger) role) for the service to outlive the session.
  - To read a user unit's state or stop it, see M(laguna.spark.systemd_user_unit).
options:
  name:
    description: Unit name, without C(.service).
    type: str
    required: true
  state:
    description:
      - C(started) keeps it running with this configuration; C(restarted)
        always restarts it; C(stopped) stops it and clears a failed state.
    type: str
    choices: [started, stopped, restarted]
    default: started
  command:
    description: The program and its arguments. Required unless O(state=stopped).
    type: list
    elements: str
  environment:
    description: Environment of the service.
    type: dict
    default: {}
  properties:
    description: Unit properties.
    type: dict
    default: {}
  description:
    description: Human-readable description; the fingerprint is appended.
    type: str
    default: laguna-spark service
  working_directory:
    description: Working directory of the service.
    type: path
  settle:
    description: Seconds the service must stay up after starting to count as started (0 to 600).
    type: int
    default: 3
  runtime_dir:
    description:
      - The user's C(XDG_RUNTIME_DIR). Defaults to C(/run/user/<uid>).
    type: path
attributes:
  check_mode:
    support: full
    description: Predicts whether the service would be started, restarted or stopped, and the systemd-run command line.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Needs systemd with a user manager (lingering or a login session).
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Ray head as a user service
  laguna.spark.systemd_run_service:
    name: laguna-ray-head
    command: [/home/spark/.venvs/vllm/bin/ray, start, --head, --block, --port, "6379"]
    environment:
      NCCL_IB_GID_INDEX: "3"
    properties:
      LimitMEMLOCK: infinity
      MemoryMax: 110G
      MemorySwapMax: "0"
  become: true
  become_user: spark

- name: Stop it
  laguna.spark.systemd_run_service:
    name: laguna-ray-head
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
fingerprint:
  description: Fingerprint of the requested configuration.
  returned: when state is not stopped
  type: str
previous_fingerprint:
  description: Fingerprint of the unit that was found, if any.
  returned: always
  type: str
active_state:
  description: ActiveState after the run (predicted in check mode).
  returned: always
  type: str
main_pid:
  description: Main PID of the service after the run.
  returned: always
  type: int
action:
  description: What was done, C(none), C(started), C(restarted) or C(stopped).
  returned: always
  type: str
argv:
  description: The systemd-run command line used (or that would be used).
  returned: when the service was (or would be) started
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.laguna.spark.plugins.module_utils import systemd_run as sr
from ansible_collections.laguna.spark.plugins.module_utils import systemd_user as su


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "stopped", "restarted"]),
            command=dict(type="list", elements="str"),
            environment=dict(type="dict", default={}),
            properties=dict(type="dict", default={}),
            description=dict(type="str", default="laguna-spark service"),
            working_directory=dict(type="path"),
            settle=dict(type="int", default=3),
            runtime_dir=dict(type="path"),
        ),
        required_if=[("state", "started", ["command"]), ("state", "restarted", ["command"])],
        supports_check_mode=True,
    )
    params = module.params
    if not 0 <= params["settle"] <= 600:
        module.fail_json(msg="settle must be between 0 and 600 seconds, not %d" % params["settle"])
    unit = params["name"] if params["name"].endswith(".service") else params["name"] + ".service"
    units = su.UserUnits(module, params["runtime_dir"])
    current = units.show_or_fail(unit, sr.SHOW_PROPERTIES)
    running = sr.is_running(current)
    previous = sr.fingerprint_of(current.get("Description"))
    result = dict(changed=False, unit=unit, previous_fingerprint=previous, action="none",
                  active_state=current.get("ActiveState", "inactive"),
                  main_pid=int(current.get("MainPID") or 0))

    if params["state"] == "stopped":
        if running or current.get("ActiveState") == "failed":
            result.update(changed=True, action="stopped", active_state="inactive", main_pid=0)
            if not module.check_mode:
                units.act(unit, "stopped")
        module.exit_json(**result)

    environment = {str(k): str(v) for k, v in params["environment"].items()}
    properties = {str(k): str(v) for k, v in params["properties"].items()}
    digest = sr.fingerprint(params["command"], environment, properties, params["working_directory"])
    result["fingerprint"] = digest
    if params["state"] == "started" and running and previous == digest:
        module.exit_json(**result)

    argv = sr.run_argv(
        module.get_bin_path("systemd-run", required=True), unit[:-len(".service")],
        params["command"], environment, properties,
        sr.description(params["description"], digest), params["working_directory"])
    result.update(changed=True, argv=argv, action="restarted" if running else "started",
                  active_state="active")
    if module.check_mode:
        module.exit_json(**result)

    if running or current.get("LoadState") == "loaded":
        units.act(unit, "stopped")
    rc, out, err = module.run_command(argv, environ_update=units.env)
    if rc != 0:
        module.fail_json(msg="systemd-run for %s failed (rc=%d): %s" % (unit, rc, err.strip()),
                         argv=argv)
    deadline = time.time() + max(params["settle"], 0)
    while True:
        now = units.show_or_fail(unit, sr.SHOW_PROPERTIES)
        if not sr.is_running(now):
            module.fail_json(
                msg="%s stopped right after starting (%s/%s, exit status %s). Last log lines: %s"
                % (unit, now.get("ActiveState"), now.get("Result"), now.get("ExecMainStatus"),
                   " | ".join(units.logs(unit)[-15:])),
                argv=argv, active_state=now.get("ActiveState"))
        if time.time() >= deadline:
            break
        time.sleep(0.5)
    result.update(active_state=now.get("ActiveState"), main_pid=int(now.get("MainPID") or 0))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
