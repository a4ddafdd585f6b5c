#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_auth_token
short_description: Make, rotate, install or read the Ray cluster's authentication token
version_added: "0.2.0"
description:
  - Ray 2.60 refuses every connection without the cluster's token when its
    processes run with C(RAY_AUTH_MODE=token). This module keeps that token in
    a file of the service user (Ray's own default is C(~/.ray/auth_token)),
    mode 0600 in a 0700 directory.
  - Without O(token) (the head), a missing token is made (256 random bits,
    64 hex digits, as C(ray get-auth-token --generate) makes them) and an
    existing one is kept, unless O(generation) differs from the generation
    recorded beside it (in C(PATH.laguna-generation)); then a new one is made.
  - With O(token) (the other nodes), the file is made to hold exactly that token.
  - The token itself is returned only with O(return_token=true) and
    O(state=read), for the one task (with C(no_log)) that hands it to the other
    nodes. Everything else reports a short sha256 (RV(digest)).
options:
  path:
    description: The token file.
    type: path
    required: true
  state:
    description:
      - C(present) makes, rotates or installs the token; C(read) only reads it
        (failing when there is none).
    type: str
    choices: [present, read]
    default: present
  token:
    description: The token to install (from the head). Never logged.
    type: str
  generation:
    description:
      - Without O(token), the wanted generation of the token (0 to 1000000);
        a different recorded one makes a new token. Unset keeps any token.
    type: int
  return_token:
    description: With O(state=read), return the token as RV(token). The task must have C(no_log).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Says whether the token would be made, rotated or installed; writes nothing.
  diff_mode:
    support: full
    description: Shows the token's digest and generation before and after, never the token.
  platform:
    support: full
    platforms: posix
    description: Any POSIX node; the token is for Ray 2.60's C(RAY_AUTH_MODE=token).
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The cluster's token, made once on the head, rotated by a new generation
  laguna.spark.ray_auth_token:
    path: /home/spark/.ray/auth_token
    generation: 1
  become: true
  become_user: spark

- name: Read it to hand it to the workers
  laguna.spark.ray_auth_token:
    path: /home/spark/.ray/auth_token
    state: read
    return_token: true
  become: true
  become_user: spark
  register: head_token
  no_log: true

- name: Install it on a worker
  laguna.spark.ray_auth_token:
    path: /home/spark/.ray/auth_token
    token: "{{ head_token.token }}"
  become: true
  become_user: spark
"""

RETURN = r"""
digest:
  description: The first 16 hex digits of the token's sha256 after the run (predicted in check mode).
  returned: always
  type: str
  sample: 3f1c0a9be2d47a61
generation:
  description: The generation recorded beside the token after the run, if any.
  returned: always
  type: int
reason:
  description: Why the token changed (C(missing), C(rotated (generation 1 -> 2)), C(differs from the head's), C(mode 0644)), or null.
  returned: always
  type: str
token:
  description: The token. Only with O(state=read) and O(return_token=true).
  returned: when asked
  type: str
"""

from ansible_collections.laguna.spark.plugins.module_utils import files, ray_auth
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        path=dict(type="path", required=True),
        state=dict(type="str", default="present", choices=["present", "read"]),
        token=dict(type="str", no_log=True),
        generation=dict(type="int"),
        return_token=dict(type="bool", default=False),
    ), mutually_exclusive=[("token", "generation")])
    params = module.params
    path = params["path"]
    if params["generation"] is not None and not 0 <= params["generation"] <= 1000000:
        module.fail_json(msg="generation must be between 0 and 1000000, not %d" % params["generation"])
    if params["state"] == "read":
        token = ray_auth.read(path)
        if token is None:
            module.fail_json(msg="no Ray token in %s: run the ray_cluster role on the head first" % path)
        result = dict(changed=False, digest=ray_auth.digest(token), generation=ray_auth.read_generation(path),
                      reason=None)
        if params["return_token"]:
            result["token"] = token
        module.exit_json(**result)
    try:
        todo = ray_auth.plan(path, params["token"], params["generation"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    before = ray_auth.read(path)
    reason = todo["reason"]
    if reason is None and files.file_mode(path, 0o777) != 0o600:
        reason = "mode %s" % oct(files.file_mode(path, 0o777) or 0)[2:].zfill(4)
    after = todo["token"] or before
    result = dict(changed=reason is not None, reason=reason, digest=ray_auth.digest(after),
                  generation=todo["generation"])
    if module._diff:
        result["diff"] = {"before": "sha256 %s generation %s\n"
                                    % (ray_auth.digest(before) or "-", ray_auth.read_generation(path)),
                          "after": "sha256 %s generation %s\n" % (ray_auth.digest(after), todo["generation"]),
                          "before_header": path, "after_header": path}
    if reason is not None and not module.check_mode:
        record = todo["generation"] if params["token"] is None else None
        ray_auth.write(module, path, after, record)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
