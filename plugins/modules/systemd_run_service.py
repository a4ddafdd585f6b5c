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
    different fingerprint (a changed command, environment or property), an
    inactive/failed unit or an active one whose processes a signal stopped
    (SIGSTOP, RV(stopped_pids)) makes it (re)start.
  - With O(persistent=true) the service is a unit file in the user's unit
    directory instead (C(~/.config/systemd/user/NAME.service)), enabled in
    C(default.target) with C(Restart=always) (O(restart)), so that the user
    manager starts it again after a reboot (with lingering) and after any
    exit that was not a requested stop, up to O(start_limit_burst) starts
    within O(start_limit_interval) seconds. The fingerprint is in its
    Description as well; a changed file restarts it. A start or restart
    that the module makes resets the unit's failed state and its start-limit
    counter first (C(systemctl reset-failed)), so the limit bounds only the
    restarts systemd makes by itself.
    Switching between transient and persistent stops the old unit first; a
    unit file left by an earlier persistent run is disabled and removed when
    O(persistent=false).
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
  persistent:
    description:
      - Run the service from an enabled unit file with C(Restart=) O(restart)
        instead of as a transient unit (see the description). A transient unit
        is not restarted by systemd.
      - With V(false) and O(state=stopped), a unit file of an earlier
        persistent run is disabled and removed as well.
    type: bool
    default: false
  after:
    description:
      - Units (of the same user manager) that a persistent unit wants and starts after (C(Wants=), C(After=)).
    type: list
    elements: str
    default: []
  restart_sec:
    description: C(RestartSec=) of a persistent unit (1 to 3600 seconds).
    type: int
    default: 10
  restart:
    description:
      - C(Restart=) of a persistent unit.
      - V(always) starts it again after any exit that was not a requested stop
        (C(systemctl stop), or this module with O(state=stopped)), a clean exit
        included (vLLM 0.25.1 exits with status 0 when one of its Ray workers
        dies). V(on-failure) does not restart after an exit with status 0 or
        by SIGHUP, SIGINT, SIGTERM or SIGPIPE.
    type: str
    choices: [always, on-failure]
    default: always
  start_limit_interval:
    description:
      - C(StartLimitIntervalSec=) of a persistent unit, in seconds (1 to 86400).
    type: int
    default: 600
  start_limit_burst:
    description:
      - C(StartLimitBurst=) of a persistent unit, that is, how many starts within
        O(start_limit_interval) seconds before systemd stops restarting it and it
        ends failed (a crash loop) (1 to 1000).
    type: int
    default: 20
  start_env_script:
    description:
      - Used by a persistent unit only (a transient unit gets its whole
        environment from the play). The text of a POSIX sh script that runs before
        each start (C(ExecStartPre=)) with one argument, a file under
        O(runtime_dir) that it writes as C(KEY=value) lines; the service reads
        that file (C(EnvironmentFile=)), whose values override O(environment).
      - For values that must be resolved anew at each start, such as the RoCE
        GID index (see M(laguna.spark.roce_gid)'s RV(laguna.spark.roce_gid#module:start_env_script)).
      - Written to C(~/.config/laguna-spark/NAME.start-env).
    type: str
  start_env_keys:
    description:
      - The variables that O(start_env_script) resolves. They are left out of
        the unit file (so a reboot that changes them needs no new file), and
        a running unit whose main process has another value than
        O(environment) says (read from C(/proc/<MainPID>/environ)) is restarted.
    type: list
    elements: str
    default: []
  unit_dir:
    description: Where persistent unit files go. Defaults to C(~/.config/systemd/user) of the calling user.
    type: path
  secret_environment:
    description:
      - Environment of the service that must not be seen (API keys, tokens).
        It is never on a command line, in the unit's properties or
        description, or in the module's output; the service reads it from
        C(~/.config/laguna-spark/NAME.secret-env) (mode 0600, the directory
        0700) through C(EnvironmentFile=).
      - The fingerprint covers it as a digest keyed with a random salt kept
        in that file, so a changed secret restarts the service and the
        fingerprint tells nothing about it.
      - Values are printable ASCII without spaces, quotes, backslashes or C($).
      - The file is removed when the service is stopped or runs without secrets.
    type: dict
    default: {}
  secret_environment_files:
    description:
      - More of the private environment, each value read on the node from
        the file named (a token another role keeps there), so that it never
        passes through the controller; treated as O(secret_environment)
        (the file's content, without surrounding whitespace).
      - A missing or empty file fails, naming it; in check mode a stand-in
        value predicts the start.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Predicts whether the service would be started, restarted or stopped, and the systemd-run command line.
  diff_mode:
    support: full
    description: Shows the unit file before and after (persistent units).
extends_documentation_fragment: [laguna.spark.systemd_user]
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

- name: The same as an enabled unit that comes back after a reboot
  laguna.spark.systemd_run_service:
    name: laguna-ray-head
    persistent: true
    command: [/home/spark/.venvs/vllm/bin/ray, start, --head, --block, --port, "6379"]
    start_env_script: "{{ gid.start_env_script }}"
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
  description: Full unit name, O(name) with C(.service).
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
stopped_pids:
  description:
    - PIDs of the unit's processes that a signal had stopped (SIGSTOP; state
      C(T)) when the module looked. A running unit with stopped processes does
      no work (a frozen raylet drops out of the Ray cluster while its unit
      stays active), so with O(state=started) it is restarted.
  returned: always
  type: list
  elements: int
action:
  description:
    - What was done, C(none), C(started), C(restarted), C(stopped), or
      C(enabled) (a persistent unit that ran with the right settings was enabled).
  returned: always
  type: str
argv:
  description: The systemd-run command line used (or that would be used).
  returned: when a transient service was (or would be) started
  type: list
  elements: str
unit_file:
  description: Path of the persistent unit file.
  returned: when O(persistent=true)
  type: str
  sample: /home/spark/.config/systemd/user/laguna-ray-head.service
start_env_drift:
  description: The O(start_env_keys) whose value in the running process differed from O(environment).
  returned: when O(persistent=true)
  type: dict
  sample: {NCCL_IB_GID_INDEX: {have: "5", want: "7"}}
persistent:
  description: Whether the unit runs from an enabled unit file after the run.
  returned: always
  type: bool
"""

from ansible_collections.laguna.spark.plugins.module_utils import systemd_run as sr
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

BOUNDS = {"settle": (0, 600), "restart_sec": (1, 3600), "start_limit_interval": (1, 86400),
          "start_limit_burst": (1, 1000)}


def main():
    module = new_module(dict(
        name=dict(type="str", required=True),
        state=dict(type="str", default="started", choices=["started", "stopped", "restarted"]),
        command=dict(type="list", elements="str"),
        environment=dict(type="dict", default={}),
        properties=dict(type="dict", default={}),
        description=dict(type="str", default="laguna-spark service"),
        working_directory=dict(type="path"),
        settle=dict(type="int", default=3),
        runtime_dir=dict(type="path"),
        persistent=dict(type="bool", default=False),
        after=dict(type="list", elements="str", default=[]),
        restart_sec=dict(type="int", default=10),
        restart=dict(type="str", default="always", choices=list(sr.RESTART_POLICIES)),
        start_limit_interval=dict(type="int", default=600),
        start_limit_burst=dict(type="int", default=20),
        start_env_script=dict(type="str"),
        start_env_keys=dict(type="list", elements="str", default=[], no_log=False),
        unit_dir=dict(type="path"),
        secret_environment=dict(type="dict", default={}, no_log=True),
        secret_environment_files=dict(type="dict", default={}, no_log=False),
    ), required_if=[("state", "started", ["command"]), ("state", "restarted", ["command"])])
    params = module.params
    for key, (low, high) in BOUNDS.items():
        if not low <= params[key] <= high:
            module.fail_json(msg="%s must be between %d and %d, not %d" % (key, low, high, params[key]))
    service = sr.Service(module)
    if params["state"] == "stopped":
        service.stop()
    else:
        environment = {str(k): str(v) for k, v in params["environment"].items()}
        properties = {str(k): str(v) for k, v in params["properties"].items()}
        try:
            if params["persistent"]:
                service.persistent(environment, properties)
            else:
                service.transient(environment, properties)
        except ValueError as exc:
            module.fail_json(msg="%s: %s" % (service.unit, exc))
    module.exit_json(**service.result)


if __name__ == "__main__":
    main()
