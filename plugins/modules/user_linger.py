#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: user_linger
short_description: Enable systemd lingering for a user and wait for its user manager, in one call
version_added: "0.3.0"
description:
  - Without lingering a user's systemd manager, and every C(systemctl --user) unit under it, stops when
    the user's last session closes.
  - Reads whether lingering is on for O(user) - logind's linger file (O(linger_dir)/<user>) exists and
    C(loginctl show-user <user> --property=Linger --value) says V(yes) - and runs
    C(loginctl enable-linger <user>) only when it is not.
  - Then waits, at most O(timeout) seconds (asking every half second), for the user manager's bus
    O(runtime_dir)/<uid>/bus, and fails naming the cause and the fix when it does not appear.
  - Returns RV(report), what loginctl says after the run, for an assert and a status report.
  - With O(state=read), only reads the file and what loginctl says (no enable, no wait).
options:
  user:
    description: The user to linger.
    type: str
    required: true
  uid:
    description:
      - The user's uid, for the bus path. Omitted, it is looked up (C(getpwnam)).
    type: int
  state:
    description:
      - V(present) enables lingering when it is off and waits for the bus; V(read) only reports.
    type: str
    choices: [present, read]
    default: present
  timeout:
    description: Seconds (0 to 604800) to wait for the user manager's bus.
    type: int
    default: 60
  linger_dir:
    description: logind's linger directory.
    type: path
    default: /var/lib/systemd/linger
  runtime_dir:
    description: The parent of the users' runtime directories.
    type: path
    default: /run/user
  loginctl:
    description: The loginctl command.
    type: str
    default: loginctl
attributes:
  check_mode:
    support: full
    description:
      - Reads lingering and reports a change when C(loginctl enable-linger) would run; runs nothing else.
      - Waits for the bus only when lingering is already on.
  diff_mode:
    support: full
    description: Shows C(Linger=) before and after.
extends_documentation_fragment: [laguna.spark.attributes.dgx_spark]
notes:
  - Enabling needs root (C(become)); O(state=read) does not.
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Enable lingering for spark
  laguna.spark.user_linger:
    user: spark
    uid: 1000
    timeout: 60
  become: true
  register: linger_state

- name: Lingering is on
  ansible.builtin.assert:
    that: linger_state.report.ok or ansible_check_mode
    fail_msg: "loginctl reports Linger={{ linger_state.report.linger }} for spark"

- name: Read lingering state of spark
  laguna.spark.user_linger:
    user: spark
    state: read
  register: linger_state
"""

RETURN = r"""
report:
  description:
    - What loginctl says after the run (before it, in check mode and with O(state=read)).
    - C(ok) when C(loginctl show-user) succeeded and said V(yes); C(linger) is what it said, or
      C(unknown (<its error>)) when it failed; C(problems) names the user when lingering is off.
  returned: always
  type: dict
  contains:
    ok:
      description: Whether loginctl says V(yes).
      type: bool
    linger:
      description: What loginctl says (V(yes), V(no)), or C(unknown (<its error>)).
      type: str
    problems:
      description: V(Linger is not enabled for <user>) when it is off; empty otherwise.
      type: list
      elements: str
  sample: {ok: true, linger: "yes", problems: []}
reasons:
  description: Why lingering was off before the run, one line each (empty when it was on).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/systemd/linger/spark does not exist, loginctl says Linger=no for spark]
enabled:
  description: Whether C(loginctl enable-linger) ran.
  returned: when O(state=present)
  type: bool
linger_file:
  description: Whether the linger file exists after the run (before it, in check mode).
  returned: always
  type: bool
bus:
  description: The user manager's bus that was waited for.
  returned: when O(state=present)
  type: str
  sample: /run/user/1000/bus
bus_waited:
  description: Seconds until the bus existed; null when there was no wait (check mode, lingering off).
  returned: when O(state=present)
  type: float
  sample: 0.0
"""

import pwd

from ansible_collections.laguna.spark.plugins.module_utils import linger
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        user=dict(type="str", required=True),
        uid=dict(type="int"),
        state=dict(type="str", choices=["present", "read"], default="present"),
        timeout=dict(type="int", default=60),
        linger_dir=dict(type="path", default=linger.LINGER_DIR),
        runtime_dir=dict(type="path", default=linger.RUNTIME_DIR),
        loginctl=dict(type="str", default="loginctl"),
    ))
    params = module.params
    user = params["user"]
    if params["state"] == "read":
        module.exit_json(**linger.status(module.run_command, user, params["linger_dir"], params["loginctl"]))
    if not 0 <= params["timeout"] <= 604800:
        module.fail_json(msg="timeout must be between 0 and 604800 seconds, not %d" % params["timeout"])
    uid = params["uid"]
    if uid is None:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            module.fail_json(msg="no user %s on this node (getent passwd %s): create it first" % (user, user))
    try:
        result = linger.ensure(module.run_command, user, uid, params["timeout"], check_mode=module.check_mode,
                               linger_dir=params["linger_dir"], runtime_dir=params["runtime_dir"],
                               loginctl=params["loginctl"])
    except linger.LingerError as exc:
        module.fail_json(msg=str(exc))
    before = result.pop("before")
    if module._diff:
        after = "yes" if result["changed"] and module.check_mode else result["report"]["linger"]
        header = linger.linger_file(user, params["linger_dir"])
        result["diff"] = {"before": "Linger=%s\n" % before, "after": "Linger=%s\n" % after,
                          "before_header": header, "after_header": header}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
