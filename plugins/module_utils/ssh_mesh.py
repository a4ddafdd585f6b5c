# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The ssh_mesh role's decisions: what a node's ~/.ssh lacks, as the role wants it.

* ``read_keys``: the node's keys as the role reads them (the user's public key,
  each host key it has), each stripped.
* ``attr_differences``: what differs in a path's owner and mode (a directory or
  a file), one line each, as ansible.builtin.file and lineinfile set them.
* ``authorized_plan``: the text of ``authorized_keys`` with the missing lines
  added, as ansible.builtin.lineinfile adds each (a line already there, equal
  once its line ending is stripped, is kept; a missing one goes at the end,
  after a newline when the file does not end with one); other lines are kept.
* ``verify_argv``: the ssh command of the mesh check (the same as the role's
  verify.yml runs), and ``as_user``: a command run as the service user.
* ``run_checks``: the mesh check itself, each target's ssh as the user, bounded
  (ssh_mesh_peers and network_gate_probe both run it).
"""

from __future__ import annotations

import os
import stat

from ansible_collections.laguna.spark.plugins.module_utils import files, known_hosts


def read_keys(pubkey_path, host_key_dir, host_key_types):
    """{pubkey, hostkeys, pubkey_error}: the user's public key ("" when it cannot be read; the
    error in ``pubkey_error``) and each host key ``ssh_host_TYPE_key.pub`` that can be read,
    in the order of ``host_key_types``. A host key that is not text raises UnicodeDecodeError."""
    try:
        with open(pubkey_path, "r") as handle:
            pubkey, error = handle.read().strip(), None
    except (OSError, UnicodeDecodeError) as exc:
        pubkey, error = "", "%s: %s" % (pubkey_path, exc)
    hostkeys = []
    for kind in host_key_types:
        # Not text: UnicodeDecodeError (the slurp and b64decode it replaces failed too).
        text = files.read_text(os.path.join(host_key_dir, "ssh_host_%s_key.pub" % kind))
        if text is not None:
            hostkeys.append(text.strip())
    return {"pubkey": pubkey, "hostkeys": hostkeys, "pubkey_error": error}


def attr_differences(path, st, uid, user, mode, directory=False):
    """[(what, line)] of ``path`` (``st``: its os.stat, None when missing) against owner ``uid``
    (``user`` for the line) and ``mode``: "missing" (a directory to create), "not_dir" (a file
    where a directory is wanted: refused, as ansible.builtin.file refuses it), "owner", "mode"."""
    if st is None:
        return [("missing", "%s: missing; created (owner %s, mode %04o)" % (path, user, mode))] if directory else []
    if directory and not stat.S_ISDIR(st.st_mode):
        return [("not_dir", "%s exists and is not a directory: move it away and rerun" % path)]
    found = []
    if st.st_uid != uid:
        found.append(("owner", "%s: owner uid %d -> %s" % (path, st.st_uid, user)))
    if stat.S_IMODE(st.st_mode) != mode:
        found.append(("mode", "%s: mode %04o -> %04o" % (path, stat.S_IMODE(st.st_mode), mode)))
    return found


def authorized_plan(text, lines):
    """(after, added): ``text`` (the file's, "" when missing) with each of ``lines`` that is not a
    line of it appended, as a loop of lineinfile (line=..., insertafter EOF) leaves it."""
    have = text.splitlines(True)
    added = []
    for line in lines:
        if any(cur.rstrip("\r\n") == line for cur in have):
            continue
        if have and have[-1][-1:] not in ("\n", "\r"):
            have.append("\n")
        have.append(line + "\n")
        added.append(line)
    return "".join(have), added


def key_label(line):
    """A public key line for messages: its comment and SHA256 fingerprint (``KEYTYPE BASE64 [COMMENT]``)."""
    fields = line.split(None, 2)
    if len(fields) < 2:
        return repr(line)
    return "%s%s key %s" % (fields[2] + "'s " if len(fields) > 2 else "", fields[0],
                            known_hosts.fingerprint(fields[1]))


def verify_argv(user, address, timeout):
    """The ssh command of the mesh check: no prompt (BatchMode), only pinned host keys."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=%d" % timeout,
            "%s@%s" % (user, address), "true"]


def as_user(argv, user, euid, user_uid, runuser):
    """``argv`` run as ``user``: as it is when this process already is that user, else through
    ``runuser -u USER --`` (which sets HOME and drops root's groups, as become_user does)."""
    if euid == user_uid:
        return list(argv)
    return [runuser, "-u", user, "--"] + list(argv)


def run_checks(module, account, targets, timeout):
    """Each of ``targets`` ([{name, address}]) checked with ``verify_argv`` as ``account`` (a pwd
    entry), bounded by twice the timeout plus one: [{item, address, rc, stderr}], in order."""
    runuser = module.get_bin_path("runuser", required=account.pw_uid != os.geteuid())
    limiter = module.get_bin_path("timeout")
    checks = []
    for target in targets:
        argv = as_user(verify_argv(account.pw_name, target["address"], timeout),
                       account.pw_name, os.geteuid(), account.pw_uid, runuser)
        limit = 2 * timeout + 1
        if limiter:  # ConnectTimeout does not bound a server that accepts and then stalls
            argv = [limiter, "--kill-after=2", str(limit)] + argv
        rc, _out, err = module.run_command(argv)
        if rc in (124, 137):
            err = (err or "") + "\nssh timed out after %d s" % limit
        checks.append(dict(item=target["name"], address=target["address"], rc=rc, stderr=err))
    return checks


def targets(facts_of, address_var="laguna_roce_ip"):
    """[{name, address}] the mesh check connects to: each peer at its ``address_var``.
    ``facts_of``: (host, variables) pairs of the peers (peers.host_vars). ValueError for a peer
    without that address."""
    found = []
    for peer, facts in facts_of:
        address = facts[address_var] if address_var in facts else None
        if address in (None, ""):
            raise ValueError("%s has no %s" % (peer, address_var))
        found.append({"name": peer, "address": str(address)})
    return found


def recheck(checks, changed_peers):
    """Whether the in-module check of this node must be run again after every node wrote its
    ``~/.ssh``: some check failed to a peer that changed its own ``~/.ssh`` in this run (each node's
    check runs while the others may still be writing theirs)."""
    changed = set(changed_peers)
    return any(check.get("rc") != 0 and check.get("item") in changed for check in checks or [])
