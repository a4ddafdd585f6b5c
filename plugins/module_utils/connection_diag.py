# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Tell SSH and sudo failures apart by what OpenSSH and sudo print.

The patterns follow the texts of OpenSSH (sshconnect.c, sshconnect2.c, ssh.c,
packet.c, readconf.c) and sudo (plugins/sudoers/logging.c, src/tgetpass.c),
plus the messages Ansible wraps around them (plugins/connection/ssh.py,
plugins/become/sudo.py, plugins/action/__init__.py). Each cause comes with
the fix for it, so that a changed host key is not answered with "install the
key in authorized_keys".
"""

from __future__ import annotations

import re


def _tables(causes, summaries, fixes):
    """(patterns, summaries, fixes) of a table of causes: [(cause, compiled
    pattern)] in order, and {cause: text} of each, with ``summaries`` and
    ``fixes`` of the causes that no pattern finds (ok, unknown)."""
    patterns = [(cause, re.compile(pattern)) for cause, pattern, _summary, _fix in causes]
    return (patterns, dict(((cause, summary) for cause, _pattern, summary, _fix in causes), **summaries),
            dict(((cause, fix) for cause, _pattern, _summary, fix in causes), **fixes))


# One entry per cause: (cause, pattern, summary, fix), in order: the first
# pattern that matches wins. Host key problems come first: after a changed
# key, ssh may also print "Permission denied" (password authentication is
# disabled as a precaution).
SSH_CAUSES = [
    ("host_key_changed",
     r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for \S+ has changed and you have requested strict checking"
     r"|POSSIBLE DNS SPOOFING DETECTED",
     "the host key of {address} has changed since it was recorded in known_hosts",
     "if {target} was reinstalled or its keys regenerated, remove the old key on {source} "
     "(ssh-keygen -R {address}, in the known_hosts of the user running ssh) and rerun: the ssh_mesh "
     "role records the new one; otherwise find out who answers at {address} before trusting it"),
    ("host_key_unknown",
     r"No \S+ host key is known for \S+ and you have requested strict checking|Host key verification failed",
     "the host key of {address} is not in known_hosts and strict checking is on",
     "record the key: rerun the ssh_mesh role, or ssh-keyscan {address} >> ~{user}/.ssh/known_hosts on {source}"),
    ("dns", r"Could not resolve hostname",
     "{address} does not resolve",
     "use an IP address, or fix name resolution on {source}"),
    ("refused", r"port \d+: Connection refused",
     "{address} answers but nothing listens on the SSH port (sshd stopped?)",
     "start sshd on {target} (systemctl start ssh) and check that it listens on {address}"),
    ("host_down",
     r"port \d+: (No route to host|Connection timed out|Network is unreachable|Operation timed out|Host is down)"
     r"|Connection timed out during banner exchange|timed out after \d+ s",
     "{address} does not answer: the host is down or the link to it is",
     "power {target} on or check its link ({address}: cable, interface up, address), then rerun"),
    ("auth", r"Permission denied \(([^)]*)\)",
     "{address} refused {user}'s keys ({methods})",
     "install {source}'s public key for {user} in {target}'s ~{user}/.ssh/authorized_keys "
     "(the ssh_mesh role does this)"),
    ("config", r"Bad owner or permissions on \S+",
     "ssh refuses a file with bad owner or permissions",
     "fix the owner and mode of the file ssh names (chmod 600, owned by {user})"),
    ("closed", r"Connection (closed|reset) by |kex_exchange_identification",
     "{address} closed the connection during the handshake (sshd overloaded, MaxStartups, or a firewall)",
     "retry; if it persists, look at sshd's log on {target} (journalctl -u ssh)"),
]
SSH_PATTERNS, SSH_SUMMARY, SSH_FIX = _tables(
    SSH_CAUSES, {"ok": "connected", "unknown": "ssh failed"},
    {"unknown": "run ssh -v {user}@{address} true as {user} on {source} to see why"})


def classify_ssh(stderr, rc=255):
    """-> (cause, detail): cause is a key of SSH_SUMMARY; detail a matched text or None."""
    if rc == 0:
        return "ok", None
    text = stderr or ""
    for cause, pattern in SSH_PATTERNS:
        match = pattern.search(text)
        if match:
            return cause, match.group(1) if cause == "auth" else match.group(0)
    return "unknown", None


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip() and not set(line.strip()) <= {"@"}]
    return lines[-1] if lines else ""


def explain_ssh(stderr, rc, user, address, source, target, waited=None):
    """-> dict(cause, summary, fix, message)."""
    cause, detail = classify_ssh(stderr, rc)
    fields = dict(user=user, address=address, source=source, target=target, methods=detail or "")
    summary = SSH_SUMMARY[cause].format(**fields)
    result = dict(cause=cause, summary=summary, fix=None, message=summary)
    if cause == "ok":
        return result
    result["fix"] = SSH_FIX[cause].format(**fields)
    waited_text = " after %s s" % waited if waited is not None else ""
    result["message"] = "%s cannot SSH to %s (%s) as %s%s: %s. Fix: %s. Last thing ssh said: %s" % (
        source, target, address, user, waited_text, summary, result["fix"], last_line(stderr) or "(nothing)")
    return result


# Become failures, (cause, pattern, summary, fix) as above: sudo's own
# words, then Ansible's.
BECOME_CAUSES = [
    ("not_in_sudoers", r"(\S+) is not in the sudoers file",
     "{source} is not in the sudoers file of {target}",
     "add {source} to sudoers on {target} (e.g. the sudo group), or connect as a user who is"),
    ("not_allowed",
     r"Sorry, user (\S+) (is not allowed to execute|may not run sudo)|(\S+) is not allowed to run sudo on",
     "{source} may use sudo on {target}, but not to run commands as {user}",
     "allow {source} to run commands as {user} in sudoers on {target}"),
    ("unknown_user", r"unknown user:? (\S+)",
     "there is no user {user} on {target}",
     "create {user} on {target}, or set laguna_user to the account that owns the vLLM venv"),
    ("password_incorrect", r"Incorrect \w+ password|incorrect password attempt|Sorry, try again",
     "the sudo password given for {source} is wrong",
     "pass the right one (--ask-become-pass or ansible_become_password)"),
    ("password_missing", r"Missing \w+ password|a password is required|a terminal is required to read the password",
     "sudo on {target} asks {source} for a password and none was given",
     "run with --ask-become-pass (-K), set ansible_become_password, or give {source} NOPASSWD in sudoers"),
    ("timeout", r"Timeout \(\d+s\) waiting for privilege escalation prompt",
     "sudo on {target} did not answer within the become timeout",
     "check sudo on {target} by hand (sudo -u {user} true); raise ansible's timeout if it is only slow"),
    ("tmp_permissions", r"Failed to set permissions on the temporary files",
     "{source} can become {user} but cannot hand it Ansible's temporary files",
     "install acl on {target} (apt install acl), or keep pipelining on in ansible.cfg"),
]
BECOME_PATTERNS, BECOME_SUMMARY, BECOME_FIX = _tables(
    BECOME_CAUSES, {"unknown": "becoming {user} failed"},
    {"unknown": "run sudo -u {user} true as {source} on {target} to see why"})


def classify_become(message):
    text = message or ""
    for cause, pattern in BECOME_PATTERNS:
        if pattern.search(text):
            return cause
    return "unknown"


def explain_become(message, user, source, target):
    cause = classify_become(message)
    fields = dict(user=user, source=source, target=target)
    summary = BECOME_SUMMARY[cause].format(**fields)
    fix = BECOME_FIX[cause].format(**fields)
    return dict(cause=cause, summary=summary, fix=fix,
                message="%s: cannot become %s: %s. Fix: %s. Last thing sudo/Ansible said: %s" % (
                    target, user, summary, fix, last_line(message) or "(nothing)"))


def ssh_argv(ssh, user, address, options, timeout):
    """`ssh -o BatchMode=yes -o ConnectTimeout=N ... user@address true`."""
    argv = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % timeout]
    argv.extend(options or [])
    argv.extend(["%s@%s" % (user, address), "true"])
    return argv
