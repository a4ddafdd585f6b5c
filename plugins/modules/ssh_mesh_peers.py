#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_mesh_peers
short_description: The service user's ~/.ssh as the SSH mesh wants it, from one read, and the mesh checked
version_added: "0.4.0"
description:
  - The second of the ssh_mesh role's two calls per node. Reads C(~/.ssh), C(authorized_keys) and
    C(known_hosts), decides what differs from what the mesh wants, changes only that, in this order
    (the order of the tasks it replaces), and says each difference in RV(differences).
  - C(~/.ssh) is a directory owned by O(user), mode 0700 (created when missing; a file there is refused).
  - Each of O(authorized_keys) is a line of C(~/.ssh/authorized_keys), as M(ansible.builtin.lineinfile)
    adds it (other lines are kept, a missing one goes at the end); the file is owned by O(user), mode 0600.
    With no key to authorize, the file is not touched.
  - The keys of O(pairs) are pinned in C(~/.ssh/known_hosts) with the code of
    M(laguna.spark.ssh_known_hosts_pin) - a key that differs from the one pinned for the same name and
    type is refused, naming the host, both fingerprints and the fixes, writing nothing to known_hosts,
    unless O(accept_changed=true).
  - With O(verify), then runs C(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=N
    USER@ADDRESS true) as O(user) to each of O(verify_targets) (also in check mode) and returns each
    result in RV(checks); a failed one does not fail the task (the role asserts on RV(checks)).
extends_documentation_fragment:
  - laguna.spark.attributes.dgx_spark
  - laguna.spark.ssh_mesh_check
attributes:
  check_mode:
    support: full
    description: Reads, says what a run would change and refuses changed host keys as a run would; writes nothing.
      The SSH check still runs.
  diff_mode:
    support: full
    description: The text of C(authorized_keys) and C(known_hosts) before and after, when they change.
options:
  home:
    description: The service user's home.
    type: path
    required: true
  user:
    description: The service user (owner of C(~/.ssh); the SSH check runs as this user).
    type: str
    required: true
  authorized_keys:
    description: The other nodes' public keys to authorize, one line each.
    type: list
    elements: str
    default: []
  pairs:
    description: The host keys to pin, as M(laguna.spark.ssh_known_hosts_pin) takes them.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The name the key is pinned under (an address).
        type: str
        required: true
      key:
        description: The public key, C(KEYTYPE BASE64).
        type: str
        required: true
      host:
        description: The inventory host the key belongs to, for messages.
        type: str
  accept_changed:
    description: Replace a pinned key that differs from the wanted one instead of refusing it.
    type: bool
    default: false
seealso:
  - module: laguna.spark.ssh_mesh_node_keys
  - module: laguna.spark.ssh_known_hosts_pin
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The other nodes' keys authorized and their host keys pinned
  laguna.spark.ssh_mesh_peers:
    home: /home/spark
    user: spark
    authorized_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIoBUBYBOB5TxGjJ0SZNkKyDtiaaBCvEw2Wup1t38J5k spark@spark-2"]
    pairs:
      - name: 192.168.100.2
        host: spark-2
        key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIoBUBYBOB5TxGjJ0SZNkKyDtiaaBCvEw2Wup1t38J5k
    verify: true
    verify_targets: [{name: spark-2, address: 192.168.100.2}]
  become: true
"""

RETURN = r"""
differences:
  description: What was (in check mode, would be) changed, one line each; empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["/home/spark/.ssh/authorized_keys: authorize spark@spark-2's key"]
authorized:
  description: The keys added to C(authorized_keys) (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
added:
  description: The host keys pinned (or that would be), as M(laguna.spark.ssh_known_hosts_pin) returns them.
  returned: always
  type: list
  elements: dict
changed_keys:
  description: Each pinned host key that differs from the wanted one, with both fingerprints.
  returned: always
  type: list
  elements: dict
checks:
  description: With O(verify), the SSH check of each target.
  returned: always
  type: list
  elements: dict
  contains:
    item:
      description: The target's inventory name.
      type: str
    address:
      description: The address connected to.
      type: str
    rc:
      description: The exit status of ssh (124 or 137 when it was stopped after twice the timeout plus one).
      type: int
    stderr:
      description: What ssh printed on stderr.
      type: str
diff:
  description: With C(--diff), the files' text before and after.
  returned: diff mode
  type: list
  elements: dict
"""

import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import files, known_hosts, ssh_mesh
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def stat_of(path):
    try:
        return os.stat(path)
    except OSError:
        return None


def fix_attrs(path, wants, uid, mode):
    """Apply the owner and mode differences ``wants`` ([(what, line)])."""
    kinds = set(what for what, _line in wants)
    if "owner" in kinds:
        os.chown(path, uid, -1)
    if "mode" in kinds:
        os.chmod(path, mode)


def ssh_dir(module, path, account, differences):
    wants = ssh_mesh.attr_differences(path, stat_of(path), account.pw_uid, account.pw_name, 0o700, directory=True)
    for what, line in wants:
        if what == "not_dir":
            module.fail_json(msg=line)
        differences.append(line)
    if wants and not module.check_mode:
        if wants[0][0] == "missing":
            os.makedirs(path, 0o700)
            os.chmod(path, 0o700)
            os.chown(path, account.pw_uid, -1)
        else:
            fix_attrs(path, wants, account.pw_uid, 0o700)


def authorize(module, path, keys, account, differences, diffs):
    if not keys:
        return []
    try:
        before = files.read_text(path, default=None, newline="")
    except UnicodeDecodeError as exc:
        module.fail_json(msg="%s is not text: %s" % (path, exc))
    if before is None and os.path.exists(path):
        module.fail_json(msg="cannot read %s" % path)
    after, added = ssh_mesh.authorized_plan(before or "", keys)
    for key in added:
        differences.append("%s: authorize %s" % (path, ssh_mesh.key_label(key)))
    if added and module._diff:
        diffs.append(dict(before=before or "", after=after, before_header=path, after_header=path))
    wants = []
    if before is not None:
        wants = ssh_mesh.attr_differences(path, stat_of(path), account.pw_uid, account.pw_name, 0o600)
    if before is None:
        differences.append("%s: created (owner %s, mode 0600)" % (path, account.pw_name))
    differences.extend(line for _what, line in wants)
    if not module.check_mode:
        if added:
            try:
                files.write_atomic(module, path, after, mode=0o600, prefix=".laguna-authorized_keys-")
            except (IOError, OSError) as exc:
                module.fail_json(msg="cannot write %s: %s" % (path, exc))
        wants = ssh_mesh.attr_differences(path, stat_of(path), account.pw_uid, account.pw_name, 0o600)
        fix_attrs(path, wants, account.pw_uid, 0o600)
    return added


def pin(module, path, pairs, differences, diffs, result):
    try:
        before = known_hosts.read(path)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, exc), changed=bool(differences), differences=differences)
    try:
        todo = known_hosts.plan(before, pairs, module.params["accept_changed"])
    except known_hosts.BadKey as exc:
        module.fail_json(msg="%s: %s" % (path, exc), changed=bool(differences), differences=differences)
    result.update(added=[dict((k, v) for k, v in item.items() if k != "key") for item in todo.added],
                  changed_keys=[change.as_dict() for change in todo.changed])
    if todo.refused:
        result.update(changed=bool(differences), differences=differences)
        module.fail_json(msg=known_hosts.refusal(todo, path, known_hosts.owner_name(path)), **result)
    for item in todo.added:
        differences.append("%s: pin %s's %s key under %s" % (path, item["host"], item["type"], item["name"]))
    for change in todo.changed:
        differences.append("%s: replace %s's %s key under %s (accepted): %s -> %s" % (
            path, change.host, change.keytype, change.name, change.as_dict()["old_fingerprint"],
            change.as_dict()["new_fingerprint"]))
    if todo.writes and module._diff:
        diffs.append(dict(before=todo.before, after=todo.after, before_header=path, after_header=path))
    if todo.writes and not module.check_mode:
        try:
            known_hosts.write(module, path, todo.after)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, exc), changed=bool(differences),
                             differences=differences)


def main():
    module = new_module(dict(
        home=dict(type="path", required=True),
        user=dict(type="str", required=True),
        authorized_keys=dict(type="list", elements="str", default=[], no_log=False),
        pairs=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            key=dict(type="str", required=True, no_log=False),
            host=dict(type="str"),
        )),
        accept_changed=dict(type="bool", default=False),
        verify=dict(type="bool", default=False),
        verify_targets=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            address=dict(type="str", required=True),
        )),
        connect_timeout=dict(type="int", default=5),
    ))
    p = module.params
    if not 1 <= p["connect_timeout"] <= 600:
        module.fail_json(msg="connect_timeout must be between 1 and 600 seconds, not %d" % p["connect_timeout"])
    try:
        account = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="%s is not a user on this node: create it (the laguna role does) and rerun" % p["user"])
    directory = os.path.join(p["home"], ".ssh")
    differences, diffs = [], []
    result = dict(added=[], changed_keys=[], checks=[])
    ssh_dir(module, directory, account, differences)
    result["authorized"] = authorize(module, os.path.join(directory, "authorized_keys"),
                                     [k.strip() for k in p["authorized_keys"] if k.strip()], account,
                                     differences, diffs)
    pin(module, os.path.join(directory, "known_hosts"), p["pairs"], differences, diffs, result)
    if p["verify"]:
        result["checks"] = ssh_mesh.run_checks(module, account, p["verify_targets"], p["connect_timeout"])
    if diffs and module._diff:
        result["diff"] = diffs
    module.exit_json(changed=bool(differences), differences=differences, **result)


if __name__ == "__main__":
    main()
