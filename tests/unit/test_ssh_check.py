"""ssh_check: SSH and sudo failures told apart by what OpenSSH and sudo print.

The stderr texts below are built from the format strings of the upstream
sources (openssh/openssh-portable at 0ef0f5a8, sudo-project/sudo at 2e18923c):

* sshconnect.c: warn_changed_key() ("@    WARNING: REMOTE HOST IDENTIFICATION
  HAS CHANGED!     @", "Offending %s key in %s:%lu", "Host key for %.200s has
  changed and you have requested strict checking."), check_host_key() ("No %s
  host key is known for %.200s and you have requested strict checking."),
  ssh_connect_direct() ("ssh: connect to host %s port %s: %s" with strerror());
* sshconnect2.c: "Host key verification failed." and "%s@%s: Permission
  denied (%s).";
* ssh.c: resolve_host() ("%s: Could not resolve hostname %.100s: %s");
* packet.c: "Connection closed by %s"; readconf.c: "Bad owner or permissions on %s";
* sudo plugins/sudoers/logging.c: "%s is not in the sudoers file.",
  "Sorry, user %s may not run sudo on %s.", "Sorry, user %s is not allowed to
  execute '%s%s%s' as %s%s%s on %s.", "a password is required",
  "%u incorrect password attempts"; src/tgetpass.c: "a terminal is required to
  read the password; ..."; plugins/sudoers/sudoers.c: "unknown user %s";
* ansible-core 2.19: plugins/connection/ssh.py ("Missing %s password",
  "Incorrect %s password", "Timeout (%ds) waiting for privilege escalation
  prompt: %s", "Failed to connect to the host via ssh: %s"), and the task error
  of a become that dies early ("Premature end of stream waiting for become success.").
"""
import os
import time

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import connection_diag as cd
from ansible_collections.laguna.spark.plugins.modules import ssh_check

CHANGED = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:4nGhY8hRS7F1JUW7NF0/98yG1Sz/0726EWncvn6/PzQ.
Please contact your system administrator.
Add correct host key in /home/spark/.ssh/known_hosts to get rid of this message.
Offending ED25519 key in /home/spark/.ssh/known_hosts:3
Host key for 192.168.100.2 has changed and you have requested strict checking.
Host key verification failed.
"""
# StrictHostKeyChecking=accept-new still refuses a changed key, and ssh
# goes on to say that password authentication is off: the cause is the key.
CHANGED_ACCEPT_NEW = CHANGED.replace(
    "Host key for 192.168.100.2 has changed and you have requested strict checking.\nHost key verification failed.\n",
    "Password authentication is disabled to avoid man-in-the-middle attacks.\n"
    "spark@192.168.100.2: Permission denied (publickey,password).\n")
UNKNOWN_KEY = ("No ED25519 host key is known for 192.168.100.2 and you have requested strict checking.\n"
               "Host key verification failed.\n")
NO_ROUTE = "ssh: connect to host 192.168.100.2 port 22: No route to host\n"
TIMED_OUT = "ssh: connect to host 192.168.100.2 port 22: Connection timed out\n"
UNREACHABLE_NET = "ssh: connect to host 192.168.100.2 port 22: Network is unreachable\n"
REFUSED = "ssh: connect to host 192.168.100.2 port 22: Connection refused\n"
DNS = "ssh: Could not resolve hostname spark-2: Name or service not known\n"
DENIED = "spark@192.168.100.2: Permission denied (publickey).\n"
CLOSED = "Connection closed by 192.168.100.2 port 22\n"
BAD_PERMS = "Bad owner or permissions on /home/spark/.ssh/config\n"


@pytest.mark.parametrize("stderr, cause", [
    (CHANGED, "host_key_changed"),
    (CHANGED_ACCEPT_NEW, "host_key_changed"),
    (UNKNOWN_KEY, "host_key_unknown"),
    (NO_ROUTE, "host_down"),
    (TIMED_OUT, "host_down"),
    (UNREACHABLE_NET, "host_down"),
    ("Connection timed out during banner exchange\nConnection to 192.168.100.2 port 22 timed out\n", "host_down"),
    (REFUSED, "refused"),
    (DNS, "dns"),
    (DENIED, "auth"),
    (CLOSED, "closed"),
    ("kex_exchange_identification: read: Connection reset by peer\n", "closed"),
    (BAD_PERMS, "config"),
    ("something new\n", "unknown"),
])
def test_ssh_failures_are_classified(stderr, cause):
    assert cd.classify_ssh(stderr, 255)[0] == cause


def test_the_advice_fits_the_cause():
    def advice(stderr):
        return cd.explain_ssh(stderr, 255, "spark", "192.168.100.2", "spark-1", "spark-2", waited=5.0)

    changed = advice(CHANGED)
    assert "ssh-keygen -R 192.168.100.2" in changed["fix"] and "authorized_keys" not in changed["fix"]
    assert changed["message"].startswith("spark-1 cannot SSH to spark-2 (192.168.100.2) as spark after 5.0 s: "
                                         "the host key of 192.168.100.2 has changed")
    assert changed["message"].endswith("Last thing ssh said: Host key verification failed.")
    down = advice(NO_ROUTE)
    assert "does not answer: the host is down" in down["summary"] and "power spark-2 on" in down["fix"]
    assert "authorized_keys" not in down["fix"]
    assert "nothing listens on the SSH port" in advice(REFUSED)["summary"]
    denied = advice(DENIED)
    assert denied["summary"] == "192.168.100.2 refused spark's keys (publickey)"
    assert "~spark/.ssh/authorized_keys" in denied["fix"]
    assert "ssh-keyscan 192.168.100.2" in advice(UNKNOWN_KEY)["fix"]
    assert cd.explain_ssh("", 0, "spark", "a", "b", "c")["cause"] == "ok"


@pytest.mark.parametrize("message, cause", [
    ("Task failed: Premature end of stream waiting for become success.\n>>> Standard Error\n"
     "ubuntu is not in the sudoers file.\n", "not_in_sudoers"),
    ("ubuntu is not in the sudoers file.  This incident will be reported.", "not_in_sudoers"),
    ("Sorry, user ubuntu may not run sudo on spark-1.", "not_allowed"),
    ("Sorry, user ubuntu is not allowed to execute '/bin/sh -c echo BECOME-SUCCESS-x' as spark on spark-1.",
     "not_allowed"),
    ("Task failed: Premature end of stream waiting for become success.\n>>> Standard Error\n"
     "sudo: a password is required", "password_missing"),
    ("Missing sudo password", "password_missing"),
    ("sudo: a terminal is required to read the password; either use the -S option to read from standard "
     "input or configure an askpass helper", "password_missing"),
    ("Incorrect sudo password", "password_incorrect"),
    ("sudo: 3 incorrect password attempts", "password_incorrect"),
    ("sudo: unknown user spark", "unknown_user"),
    ("sudo: unknown user: spark", "unknown_user"),
    ("Timeout (12s) waiting for privilege escalation prompt: ", "timeout"),
    ("Failed to set permissions on the temporary files Ansible needs to create when becoming an "
     "unprivileged user (rc: 1, err: chmod: invalid mode: 'A+user:spark:rx:allow'", "tmp_permissions"),
    ("MODULE FAILURE", "unknown"),
])
def test_sudo_failures_are_classified(message, cause):
    assert cd.classify_become(message) == cause


def test_become_advice_names_users_and_fix():
    result = cd.explain_become("Task failed: Premature end of stream waiting for become success.\n"
                               ">>> Standard Error\nsudo: a password is required", "spark", "ubuntu", "spark-1")
    assert result["message"] == (
        "spark-1: cannot become spark: sudo on spark-1 asks ubuntu for a password and none was given. "
        "Fix: run with --ask-become-pass (-K), set ansible_become_password, or give ubuntu NOPASSWD in sudoers. "
        "Last thing sudo/Ansible said: sudo: a password is required")
    assert "create spark on spark-1" in cd.explain_become("sudo: unknown user spark", "spark", "ubuntu", "spark-1")["fix"]


# The module, in-process, with a stand-in ssh client that prints a recorded stderr.

@pytest.fixture
def fake_ssh(tmp_path):
    def make(stderr, rc=255, sleep=0):
        (tmp_path / "stderr.txt").write_text(stderr)
        path = tmp_path / "ssh"
        path.write_text("#!/bin/sh\necho \"$@\" > %s/argv\nsleep %s\ncat %s/stderr.txt >&2\nexit %d\n"
                        % (tmp_path, sleep, tmp_path, rc))
        path.chmod(0o755)
        return str(path)
    return make


TARGETS = [{"name": "spark-2", "address": "192.168.100.2"}]


def test_module_reports_a_changed_host_key(fake_ssh, run_module, tmp_path):
    result = run_module(ssh_check, {"targets": TARGETS, "user": "spark", "ssh": fake_ssh(CHANGED),
                                    "options": ["-o", "StrictHostKeyChecking=accept-new"], "timeout": 5,
                                    "source": "spark-1"})
    assert result.failed and result["failed_targets"] == ["spark-2"]
    assert result["results"][0]["cause"] == "host_key_changed"
    assert "ssh-keygen -R 192.168.100.2" in result["msg"]
    argv = (tmp_path / "argv").read_text().split()
    assert argv == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=accept-new",
                    "spark@192.168.100.2", "true"]


def test_module_passes_a_reachable_worker(fake_ssh, run_module):
    result = run_module(ssh_check, {"targets": TARGETS, "user": "spark", "ssh": fake_ssh("", rc=0)})
    assert not result.failed and result["results"][0]["cause"] == "ok" and result["failed_targets"] == []


def test_module_bounds_a_stalled_connection(fake_ssh, run_module):
    started = time.time()
    result = run_module(ssh_check, {"targets": TARGETS, "user": "spark", "timeout": 1,
                                    "ssh": fake_ssh("", rc=0, sleep=30)})
    assert time.time() - started < 10
    assert result.failed and result["results"][0]["cause"] == "host_down"
    assert "ssh timed out after 3 s" in result["msg"]


def test_module_against_a_closed_port_on_loopback(run_module, tmp_path):
    """The real ssh client against 127.0.0.1 on a port nothing listens on."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_module(ssh_check, {"targets": [{"name": "loop", "address": "127.0.0.1"}], "user": "nobody",
                                    "options": ["-p", str(port), "-F", os.devnull], "timeout": 3})
    assert result.failed and result["results"][0]["cause"] == "refused", result["results"][0]["stderr"]


def test_module_classifies_a_message(run_module):
    result = run_module(ssh_check, {"failure_message": "Failed to connect to the host via ssh: " + NO_ROUTE,
                                    "kind": "connection", "user": "ubuntu", "address": "10.0.0.2",
                                    "target": "spark-2", "source": "the controller"})
    assert result.failed and result["results"][0]["cause"] == "host_down"
    assert result["msg"].startswith("the controller cannot SSH to spark-2 (10.0.0.2) as ubuntu: 10.0.0.2 does not answer")
    become = run_module(ssh_check, {"failure_message": "ubuntu is not in the sudoers file.", "kind": "become",
                                    "user": "spark", "source": "ubuntu", "target": "spark-1"})
    assert become.failed and become["results"][0]["cause"] == "not_in_sudoers"
