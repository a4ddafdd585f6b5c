#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_mesh_node_keys
short_description: The service user's SSH key (made when missing) and the node's public keys, in one read
version_added: "0.4.0"
description:
  - The first of the ssh_mesh role's two calls per node. Makes the service user's key
    (C(ssh-keygen -q -t TYPE -N "" -C COMMENT -f ~/.ssh/id_TYPE), run as O(user)) only when
    C(~/.ssh/id_TYPE) is missing, creating C(~/.ssh) (mode 0700, owned by O(user)) only when that
    is missing too; that is all it changes.
  - Then reads the user's public key and each host key C(ssh_host_TYPE_key.pub) of O(host_key_types)
    the node has in O(host_key_dir), for the other nodes to authorize and pin (module
    M(laguna.spark.ssh_mesh_peers)).
  - A public key that cannot be read fails the task, except in check mode (a fresh node has no key yet
    there; RV(pubkey) is then empty).
extends_documentation_fragment:
  - laguna.spark.attributes.no_diff
  - laguna.spark.attributes.dgx_spark
attributes:
  check_mode:
    support: full
    description: Reads the keys; says that the user's key would be made, and makes nothing.
options:
  home:
    description: The service user's home; its C(.ssh) holds the key.
    type: path
    required: true
  user:
    description: The service user (owner of the key; C(ssh-keygen) runs as this user).
    type: str
    required: true
  key_type:
    description: Type of the user's key.
    type: str
    choices: [ed25519, ecdsa, rsa]
    default: ed25519
  comment:
    description: The key's comment.
    type: str
    default: ""
  host_key_dir:
    description: Where sshd's host keys are.
    type: path
    default: /etc/ssh
  host_key_types:
    description: Host key types read, in this order, when the node has them.
    type: list
    elements: str
    default: [ed25519, ecdsa, rsa]
seealso:
  - module: laguna.spark.ssh_mesh_peers
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The service user's key (made when missing) and this node's keys read
  laguna.spark.ssh_mesh_node_keys:
    home: /home/spark
    user: spark
    comment: spark@spark-1 (laguna.spark)
  become: true
  register: ssh_mesh_node
"""

RETURN = r"""
pubkey:
  description: The user's public key, stripped; empty when it is not there (check mode on a fresh node).
  returned: always
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIoBUBYBOB5TxGjJ0SZNkKyDtiaaBCvEw2Wup1t38J5k spark@spark-1 (laguna.spark)
hostkeys:
  description: Each host key the node has, stripped, in the order of O(host_key_types).
  returned: always
  type: list
  elements: str
differences:
  description: What was (in check mode, would be) changed, one line each.
  returned: always
  type: list
  elements: str
  sample: ["/home/spark/.ssh/id_ed25519: missing; made with ssh-keygen"]
"""

import os
import pwd

from ansible_collections.laguna.spark.plugins.module_utils import ssh_mesh
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        home=dict(type="path", required=True),
        user=dict(type="str", required=True),
        key_type=dict(type="str", default="ed25519", choices=["ed25519", "ecdsa", "rsa"]),
        comment=dict(type="str", default=""),
        host_key_dir=dict(type="path", default="/etc/ssh"),
        host_key_types=dict(type="list", elements="str", default=["ed25519", "ecdsa", "rsa"], no_log=False),
    ))
    p = module.params
    try:
        account = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="%s is not a user on this node: create it (the laguna role does) and rerun" % p["user"])
    ssh_dir = os.path.join(p["home"], ".ssh")
    key = os.path.join(ssh_dir, "id_%s" % p["key_type"])
    differences = []
    if not os.path.exists(key):
        if not os.path.lexists(ssh_dir):
            differences.append("%s: missing; created (owner %s, mode 0700) for the key" % (ssh_dir, p["user"]))
        differences.append("%s: missing; made with ssh-keygen" % key)
        if not module.check_mode:
            if not os.path.lexists(ssh_dir):
                os.makedirs(ssh_dir, 0o700)
                os.chmod(ssh_dir, 0o700)
                os.chown(ssh_dir, account.pw_uid, -1)
            runuser = module.get_bin_path("runuser", required=account.pw_uid != os.geteuid())
            argv = ssh_mesh.as_user(["ssh-keygen", "-q", "-t", p["key_type"], "-N", "", "-C", p["comment"], "-f", key],
                                    p["user"], os.geteuid(), account.pw_uid, runuser)
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg="ssh-keygen could not make %s (rc=%d): %s" % (key, rc, (err or out).strip()),
                                 cmd=argv, changed=False)
    try:
        read = ssh_mesh.read_keys(key + ".pub", p["host_key_dir"], p["host_key_types"])
    except UnicodeDecodeError as exc:
        module.fail_json(msg="a host key in %s is not text: %s" % (p["host_key_dir"], exc), changed=bool(differences))
    if read["pubkey_error"] and not module.check_mode:
        module.fail_json(msg="cannot read the user's public key %s" % read["pubkey_error"], changed=bool(differences))
    module.exit_json(changed=bool(differences), differences=differences, pubkey=read["pubkey"],
                     hostkeys=read["hostkeys"])


if __name__ == "__main__":
    main()
