"""user_linger / module_utils.linger: the linger role's one call (read lingering, enable it when off,
wait for the user manager's bus), with a fake loginctl and a tmp directory standing in for
/var/lib/systemd/linger and /run/user."""
import os
import stat
import sys

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import linger
from ansible_collections.laguna.spark.plugins.modules import user_linger

USER, UID = "spark", 1000


class Logind:
    """A fake loginctl (show-user, enable-linger) over tmp dirs; ``calls`` holds every argv."""

    def __init__(self, tmp_path, lingering=False, says=None, show_rc=0, enable_rc=0, starts_manager=True):
        self.linger_dir = str(tmp_path / "linger")
        self.runtime_dir = str(tmp_path / "run-user")
        os.makedirs(self.linger_dir)
        os.makedirs(self.runtime_dir)
        self.says, self.show_rc, self.enable_rc, self.starts_manager = says, show_rc, enable_rc, starts_manager
        self.calls = []
        if lingering:
            self.enable()

    @property
    def bus(self):
        return os.path.join(self.runtime_dir, str(UID), "bus")

    def enable(self):
        open(os.path.join(self.linger_dir, USER), "w").close()
        if self.starts_manager:
            os.makedirs(os.path.dirname(self.bus), exist_ok=True)
            open(self.bus, "w").close()

    def run(self, argv):
        self.calls.append(list(argv))
        if argv[1] == "show-user":
            if self.show_rc:
                return self.show_rc, "", "Failed to get user: User ID 1000 is not logged in or lingering\n"
            on = os.path.exists(os.path.join(self.linger_dir, USER))
            return 0, "%s\n" % (self.says or ("yes" if on else "no")), ""
        if argv[1] == "enable-linger":
            if self.enable_rc:
                return self.enable_rc, "", "Could not enable linger: Access denied\n"
            self.says, self.show_rc = None, 0
            self.enable()
            return 0, "", ""
        raise AssertionError(argv)

    def verbs(self):
        return [c[1] for c in self.calls]

    def ensure(self, check_mode=False, timeout=60, wait=None):
        return linger.ensure(self.run, USER, UID, timeout, check_mode=check_mode, linger_dir=self.linger_dir,
                             runtime_dir=self.runtime_dir, wait=wait or linger.wait_for_path)


def no_wait(path, timeout):
    raise AssertionError("waited for %s" % path)


def test_a_converged_node_is_one_read_and_no_change(tmp_path):
    logind = Logind(tmp_path, lingering=True)
    result = logind.ensure()
    assert logind.verbs() == ["show-user"]
    assert not result["changed"] and not result["enabled"] and result["reasons"] == []
    assert result["report"] == {"ok": True, "linger": "yes", "problems": []}
    assert result["bus"] == logind.bus and result["bus_waited"] == 0.0 and result["linger_file"]


def test_lingering_off_is_enabled_then_waited_for_and_reread(tmp_path):
    logind = Logind(tmp_path)
    result = logind.ensure()
    assert logind.calls == [["loginctl", "show-user", USER, "--property=Linger", "--value"],
                            ["loginctl", "enable-linger", USER],
                            ["loginctl", "show-user", USER, "--property=Linger", "--value"]]
    assert result["changed"] and result["enabled"] and result["before"] == "no"
    assert result["reasons"] == ["%s/%s does not exist" % (logind.linger_dir, USER),
                                 "loginctl says Linger=no for spark"]
    assert result["report"]["ok"] and result["linger_file"] and result["bus_waited"] is not None
    # The rerun changes nothing.
    assert not logind.ensure()["changed"]


def test_check_mode_reports_the_change_and_runs_nothing(tmp_path):
    logind = Logind(tmp_path)
    result = logind.ensure(check_mode=True, wait=no_wait)
    assert logind.verbs() == ["show-user"] and not os.listdir(logind.linger_dir)
    assert result["changed"] and not result["enabled"] and result["bus_waited"] is None
    assert result["report"] == {"ok": False, "linger": "no", "problems": ["Linger is not enabled for spark"]}


def test_check_mode_on_a_converged_node_still_looks_at_the_bus(tmp_path):
    logind = Logind(tmp_path, lingering=True)
    os.remove(logind.bus)
    with pytest.raises(linger.LingerError, match="with lingering on"):
        logind.ensure(check_mode=True, wait=lambda path, timeout: None)


@pytest.mark.parametrize("kwargs, reason", [
    ({"says": "no"}, "loginctl says Linger=no for spark"),
    ({"show_rc": 1}, "loginctl says Linger=unknown (Failed to get user: User ID 1000 is not logged in or "
                     "lingering) for spark"),
])
def test_a_linger_file_that_loginctl_does_not_confirm_is_enabled_again(tmp_path, kwargs, reason):
    logind = Logind(tmp_path, lingering=True, **kwargs)
    result = logind.ensure(check_mode=True, wait=no_wait)
    assert result["changed"] and result["reasons"] == [reason] and logind.verbs() == ["show-user"]
    result = logind.ensure()
    assert logind.verbs()[1:] == ["show-user", "enable-linger", "show-user"] and result["report"]["ok"]


def test_loginctl_saying_yes_without_the_file_is_enabled(tmp_path):
    logind = Logind(tmp_path, says="yes")
    result = logind.ensure()
    assert result["reasons"] == ["%s/%s does not exist" % (logind.linger_dir, USER)]
    assert "enable-linger" in logind.verbs() and result["linger_file"]


def test_a_failing_enable_names_the_cause_and_the_fix(tmp_path):
    logind = Logind(tmp_path, enable_rc=1)
    with pytest.raises(linger.LingerError) as error:
        logind.ensure(wait=no_wait)
    text = str(error.value)
    assert text.startswith("loginctl enable-linger spark failed (rc 1): Could not enable linger: Access denied.")
    assert "systemd-logind" in text and logind.linger_dir in text


def test_a_bus_that_never_appears_fails_naming_the_user_manager(tmp_path):
    logind = Logind(tmp_path, starts_manager=False)
    with pytest.raises(linger.LingerError) as error:
        logind.ensure(timeout=0)
    text = str(error.value)
    assert text.startswith("The user manager of spark (user@1000.service) did not create its bus %s within 0 s "
                           "after lingering was enabled" % logind.bus)
    assert "journalctl -b -u user@1000.service" in text and "linger_wait_timeout" in text


def test_the_wait_polls_until_the_path_exists_and_is_bounded():
    now, slept = [0.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    appears = iter([False, False, False, True])
    assert linger.wait_for_path("/bus", 60, exists=lambda p: next(appears), clock=lambda: now[0],
                                sleep=sleep) == 1.5
    now[0], slept[:] = 0.0, []
    assert linger.wait_for_path("/bus", 10, exists=lambda p: False, clock=lambda: now[0], sleep=sleep) is None
    assert now[0] == 10 and len(slept) == 20


def test_status_only_reads(tmp_path):
    logind = Logind(tmp_path)
    result = linger.status(logind.run, USER, logind.linger_dir)
    assert logind.verbs() == ["show-user"] and not result["changed"] and not result["linger_file"]
    assert result["report"]["linger"] == "no" and len(result["reasons"]) == 2


@pytest.fixture
def fake_loginctl(tmp_path):
    """A loginctl script over tmp dirs, for the module; its calls are logged one per line."""
    logind = Logind(tmp_path)
    script = tmp_path / "loginctl"
    log = tmp_path / "loginctl.log"
    script.write_text("""#!%s
import os, sys
LINGER, RUN, LOG = %r, %r, %r
open(LOG, "a").write(" ".join(sys.argv[1:]) + "\\n")
path = os.path.join(LINGER, sys.argv[2])
if sys.argv[1] == "show-user":
    print("yes" if os.path.exists(path) else "no")
elif sys.argv[1] == "enable-linger":
    open(path, "w").close()
    os.makedirs(os.path.join(RUN, "1000"), exist_ok=True)
    open(os.path.join(RUN, "1000", "bus"), "w").close()
""" % (sys.executable, logind.linger_dir, logind.runtime_dir, str(log)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    logind.args = {"user": USER, "uid": UID, "linger_dir": logind.linger_dir, "runtime_dir": logind.runtime_dir,
                   "loginctl": str(script), "timeout": 5}
    logind.log = lambda: log.read_text().splitlines() if log.exists() else []
    return logind


def test_the_module_in_check_mode_with_diff_then_for_real_then_again(run_module, fake_loginctl):
    checked = run_module(user_linger, fake_loginctl.args, check_mode=True, diff=True)
    assert checked["changed"] and not checked["enabled"] and fake_loginctl.log() == ["show-user spark --property=Linger --value"]
    assert checked["diff"]["before"] == "Linger=no\n" and checked["diff"]["after"] == "Linger=yes\n"
    done = run_module(user_linger, fake_loginctl.args, diff=True)
    assert done["changed"] and done["enabled"] and done["report"]["ok"] and done["diff"]["after"] == "Linger=yes\n"
    again = run_module(user_linger, fake_loginctl.args)
    assert not again["changed"] and again["report"] == {"ok": True, "linger": "yes", "problems": []}
    assert fake_loginctl.log()[-1] == "show-user spark --property=Linger --value" and len(fake_loginctl.log()) == 5


def test_the_module_read_state_never_enables(run_module, fake_loginctl):
    result = run_module(user_linger, dict(fake_loginctl.args, state="read"))
    assert not result["changed"] and not result["report"]["ok"] and "enabled" not in result
    assert fake_loginctl.log() == ["show-user spark --property=Linger --value"]


def test_the_module_refuses_an_unbounded_timeout_and_an_unknown_user(run_module, fake_loginctl):
    result = run_module(user_linger, dict(fake_loginctl.args, timeout=604801))
    assert result.failed and "timeout must be between 0 and 604800" in result["msg"]
    args = dict(fake_loginctl.args, user="no-such-user-laguna")
    del args["uid"]
    result = run_module(user_linger, args)
    assert result.failed and "no user no-such-user-laguna on this node" in result["msg"]
    assert fake_loginctl.log() == []


def test_the_module_fails_with_the_bus_message(run_module, fake_loginctl):
    open(os.path.join(fake_loginctl.linger_dir, USER), "w").close()
    result = run_module(user_linger, dict(fake_loginctl.args, timeout=0))
    assert result.failed and "did not create its bus" in result["msg"] and "with lingering on" in result["msg"]
