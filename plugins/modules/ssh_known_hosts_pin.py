#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_known_hosts_pin
short_description: Pin the cluster's SSH host keys in a known_hosts file, refusing changed ones
version_added: "0.3.0"
description:
  - Adds each wanted host key (O(pairs)) to an OpenSSH C(known_hosts) file under its name, keeps a
    key already pinned, and refuses a key that differs from the one pinned for the same name and key
    type (the host's key changed since it was recorded), unless O(accept_changed=true).
  - A refusal fails the task, writing nothing, with one message that names each such host (the name
    in C(known_hosts) and the inventory host), the key type, the pinned and the new key's SHA256
    fingerprint (as C(ssh-keygen -lf) prints them) and the two fixes, removing the old key
    (C(ssh-keygen -R NAME -f PATH), as the file's owner) or rerunning with
    C(-e ssh_mesh_accept_changed_host_keys=true) (the ssh_mesh role's variable for O(accept_changed)).
  - With O(accept_changed=true), the old key of that name and type gives way to the new one; other names
    on the same line keep theirs.
  - Plain and hashed (C(|1|salt|hash), C(HashKnownHosts yes)) entries are matched as OpenSSH matches
    them. Lines with C(@cert-authority) or C(@revoked), wildcard patterns, comments and blank lines are
    kept as they are. New keys are written as plain C(NAME KEYTYPE BASE64) lines at the end.
  - The file is written through a temporary file beside it and renamed into place; an existing file
    keeps its mode and owner, a new one is made mode 0600 (owned by its directory's owner when root
    writes it).
extends_documentation_fragment:
  - laguna.spark.attributes.dgx_spark
attributes:
  check_mode:
    support: full
    description: Says which keys would be added or replaced, and refuses changed keys as a run would; writes nothing.
  diff_mode:
    support: full
    description: The known_hosts text before and after; none when a key is refused.
options:
  path:
    description: The known_hosts file, for example C(~spark/.ssh/known_hosts).
    type: path
    required: true
  pairs:
    description: The keys to pin, one entry per name and key.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The name the key is pinned under (an address or host name, as C(ssh) is given it).
        type: str
        required: true
      key:
        description: The public key, C(KEYTYPE BASE64) (a trailing comment is ignored).
        type: str
        required: true
      host:
        description: The inventory host the key belongs to, for messages (default O(pairs[].name)).
        type: str
  accept_changed:
    description:
      - Replace a pinned key that differs from the wanted one of the same type instead of refusing it.
        Set it for one run after a host's keys were regenerated on purpose.
    type: bool
    default: false
seealso:
  - module: ansible.builtin.known_hosts
  - module: laguna.spark.ssh_check
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Pin a peer's host keys under its RoCE address
  laguna.spark.ssh_known_hosts_pin:
    path: /home/spark/.ssh/known_hosts
    pairs:
      - name: 192.168.100.2
        host: spark-2
        key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIoBUBYBOB5TxGjJ0SZNkKyDtiaaBCvEw2Wup1t38J5k
  become: true
  become_user: spark

- name: The same after the peer's keys were regenerated on purpose
  laguna.spark.ssh_known_hosts_pin:
    path: /home/spark/.ssh/known_hosts
    pairs: "{{ ssh_mesh_peers | laguna.spark.known_host_pairs(hostvars) }}"
    accept_changed: true
  become: true
  become_user: spark
"""

RETURN = r"""
added:
  description: The keys added (or, in check mode, that would be).
  returned: always
  type: list
  elements: dict
  sample: [{"host": "spark-2", "name": "192.168.100.2", "type": "ssh-ed25519",
            "fingerprint": "SHA256:8BTSgj2T69eRI4b4PiBZmeWEs5Tf9P0UNHOpxbSVNBA"}]
kept:
  description: The keys already pinned.
  returned: always
  type: list
  elements: dict
  sample: [{"host": "spark-2", "name": "192.168.100.2", "type": "ssh-ed25519"}]
changed_keys:
  description:
    - Each name whose pinned key of a type differs from the wanted one, with both fingerprints;
      replaced with O(accept_changed=true), refused otherwise.
  returned: always
  type: list
  elements: dict
  sample: [{"host": "spark-2", "name": "192.168.100.2", "type": "ssh-ed25519",
            "old_fingerprint": "SHA256:ENuVoNZyR5olN2q7VU1hBavYB38CnoyFfLYoaLO/gRY",
            "new_fingerprint": "SHA256:8BTSgj2T69eRI4b4PiBZmeWEs5Tf9P0UNHOpxbSVNBA"}]
diff:
  description: With C(--diff), the file's text before and after.
  returned: diff mode
  type: dict
"""

from ansible_collections.laguna.spark.plugins.module_utils import known_hosts
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        path=dict(type="path", required=True),
        pairs=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            key=dict(type="str", required=True, no_log=False),
            host=dict(type="str"),
        )),
        accept_changed=dict(type="bool", default=False),
    ))
    path = module.params["path"]
    try:
        before = known_hosts.read(path)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, exc))
    try:
        todo = known_hosts.plan(before, module.params["pairs"], module.params["accept_changed"])
    except known_hosts.BadKey as exc:
        module.fail_json(msg="%s: %s" % (path, exc))
    result = dict(
        changed=todo.writes,
        added=[dict((k, v) for k, v in item.items() if k != "key") for item in todo.added],
        kept=todo.kept,
        changed_keys=[change.as_dict() for change in todo.changed],
    )
    if module._diff:
        result["diff"] = dict(before=todo.before, after=todo.after, before_header=path, after_header=path)
    if todo.refused:
        result["changed"] = False
        result.pop("diff", None)
        module.fail_json(msg=known_hosts.refusal(todo, path, known_hosts.owner_name(path)), **result)
    if todo.writes and not module.check_mode:
        try:
            known_hosts.write(module, path, todo.after)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
