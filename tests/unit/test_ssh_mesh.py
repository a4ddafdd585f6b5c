"""ssh_mesh: the role's two calls per node. ssh_mesh_node_keys makes the user's key only when it is
missing and reads the keys; ssh_mesh_peers decides what ~/.ssh lacks (the directory's owner and mode,
authorized_keys as a lineinfile loop leaves it, known_hosts pins with a changed key refused), changes
only that, says each difference, and runs the mesh check with the role's ssh command; the filters that
build the check's targets and decide a second check."""
import getpass
import os
import pwd
import stat
import subprocess

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import ssh_mesh
from ansible_collections.laguna.spark.plugins.modules import ssh_mesh_node_keys, ssh_mesh_peers

from helpers.filters import run_filter

USER = getpass.getuser()
UID = pwd.getpwnam(USER).pw_uid
NAME = "10.89.77.12"


def keygen(tmp_path, name):
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "spark@" + name, "-f", str(path)], check=True)
    return (tmp_path / (name + ".pub")).read_text().strip()


@pytest.fixture
def keys(tmp_path):
    made = tmp_path / "keys"
    made.mkdir()
    return {name: keygen(made, name) for name in ("w1", "w2", "host_old", "host_new")}


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# --- decisions ---------------------------------------------------------------------------------------


def test_authorized_keys_gain_only_the_missing_lines_as_lineinfile_adds_them():
    # A line equal once its line ending is stripped is kept; others stay; a missing one goes at the end.
    text = "# mine\nssh-ed25519 AAAA w1\r\nssh-rsa BBBB other"
    after, added = ssh_mesh.authorized_plan(text, ["ssh-ed25519 AAAA w1", "ssh-ed25519 CCCC w2", "ssh-ed25519 CCCC w2"])
    assert added == ["ssh-ed25519 CCCC w2"]
    assert after == "# mine\nssh-ed25519 AAAA w1\r\nssh-rsa BBBB other\nssh-ed25519 CCCC w2\n"
    assert ssh_mesh.authorized_plan(after, ["ssh-ed25519 CCCC w2"]) == (after, [])
    assert ssh_mesh.authorized_plan("", ["k 1"]) == ("k 1\n", ["k 1"])
    # A longer line holding the key is not the key's line.
    assert ssh_mesh.authorized_plan('from="x" k 1\n', ["k 1"])[1] == ["k 1"]


def test_owner_and_mode_differences_name_each(tmp_path):
    path = tmp_path / "d"
    assert [line[0] for line in ssh_mesh.attr_differences(str(path), None, UID, USER, 0o700, directory=True)] == ["missing"]
    assert ssh_mesh.attr_differences(str(path), None, UID, USER, 0o600) == []
    path.write_text("")
    assert [line[0] for line in ssh_mesh.attr_differences(str(path), os.stat(path), UID, USER, 0o700, True)] == ["not_dir"]
    path.unlink()
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    found = ssh_mesh.attr_differences(str(path), os.stat(path), UID + 1, USER, 0o700, directory=True)
    assert [line[0] for line in found] == ["owner", "mode"]
    assert "mode 0755 -> 0700" in found[1][1]
    os.chmod(path, 0o700)
    assert ssh_mesh.attr_differences(str(path), os.stat(path), UID, USER, 0o700, directory=True) == []


def test_the_keys_read_are_stripped_in_order_and_the_missing_left_out(tmp_path):
    (tmp_path / "ssh_host_ecdsa_key.pub").write_text("ecdsa-sha2-nistp256 EEEE root@h\n")
    (tmp_path / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 DDDD root@h\n")
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAA spark@h\n")
    read = ssh_mesh.read_keys(str(tmp_path / "id.pub"), str(tmp_path), ["ed25519", "rsa", "ecdsa"])
    assert read == {"pubkey": "ssh-ed25519 AAAA spark@h", "hostkeys": ["ssh-ed25519 DDDD root@h",
                                                                       "ecdsa-sha2-nistp256 EEEE root@h"],
                    "pubkey_error": None}
    fresh = ssh_mesh.read_keys(str(tmp_path / "none.pub"), str(tmp_path), ["rsa"])
    assert fresh["pubkey"] == "" and fresh["hostkeys"] == [] and "none.pub" in fresh["pubkey_error"]


def test_the_check_is_the_ssh_command_verify_yml_runs_as_the_user():
    argv = ssh_mesh.verify_argv("spark", NAME, 5)
    assert argv == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                    "spark@" + NAME, "true"]
    assert ssh_mesh.as_user(argv, "spark", 1000, 1000, "/usr/sbin/runuser") == argv
    runuser = ["/usr/sbin/runuser", "-u", "spark", "--"]
    assert ssh_mesh.as_user(argv, "spark", 0, 1000, "/usr/sbin/runuser") == runuser + argv


def test_a_failed_check_is_made_again_only_when_its_peer_changed_its_ssh_dir():
    checks = [{"item": "w1", "rc": 0}, {"item": "w2", "rc": 255}]
    assert ssh_mesh.recheck(checks, ["w2"])
    assert not ssh_mesh.recheck(checks, ["w1"])
    assert not ssh_mesh.recheck([], ["w1"])
    assert ssh_mesh.targets([("w1", {"laguna_roce_ip": NAME})]) == [{"name": "w1", "address": NAME}]
    with pytest.raises(ValueError, match="w2 has no laguna_roce_ip"):
        ssh_mesh.targets([("w2", {})])


def test_the_filters_read_the_peers_hostvars():
    hostvars = {"w1": {"laguna_roce_ip": NAME, "ssh_mesh_apply": {"changed": True}},
                "w2": {"laguna_roce_ip": "10.89.77.13", "ssh_mesh_apply": {"changed": False}},
                "w3": {}}
    targets, missing = run_filter("ssh_mesh", "ssh_mesh_targets", [[["w1", "w2"], hostvars], [["w3"], hostvars]])
    assert targets == [{"name": "w1", "address": NAME}, {"name": "w2", "address": "10.89.77.13"}]
    assert missing.endswith("ssh_mesh_targets: w3 has no laguna_roce_ip")
    failed_w1 = [{"item": "w1", "rc": 255}, {"item": "w2", "rc": 0}]
    failed_w2 = [{"item": "w1", "rc": 0}, {"item": "w2", "rc": 255}]
    again, not_again = run_filter("ssh_mesh", "ssh_mesh_recheck", [
        [failed_w1, ["w1", "w2", "w3"], hostvars], [failed_w2, ["w1", "w2", "w3"], hostvars]])
    assert again is True and not_again is False


# --- ssh_mesh_node_keys -------------------------------------------------------------------------------


def node_keys(run_module, home, etc, check_mode=False):
    return run_module(ssh_mesh_node_keys, {"home": str(home), "user": USER, "comment": "%s@spark-1 (laguna.spark)" % USER,
                                           "host_key_dir": str(etc)}, check_mode=check_mode)


def test_the_user_key_is_made_only_when_missing_and_read_with_the_host_keys(run_module, tmp_path):
    home, etc = tmp_path / "home", tmp_path / "etc"
    home.mkdir()
    etc.mkdir()
    (etc / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 DDDD root@h\n")
    checked = node_keys(run_module, home, etc, check_mode=True)
    assert checked["changed"] and checked["pubkey"] == "" and not (home / ".ssh").exists()
    assert checked["differences"] == ["%s: missing; created (owner %s, mode 0700) for the key" % (home / ".ssh", USER),
                                      "%s: missing; made with ssh-keygen" % (home / ".ssh" / "id_ed25519")]
    made = node_keys(run_module, home, etc)
    assert made["changed"] and mode(home / ".ssh") == 0o700
    pub = (home / ".ssh" / "id_ed25519.pub").read_text().strip()
    assert made["pubkey"] == pub and pub.endswith("%s@spark-1 (laguna.spark)" % USER)
    assert made["hostkeys"] == ["ssh-ed25519 DDDD root@h"]
    again = node_keys(run_module, home, etc)
    assert not again["changed"] and again["differences"] == [] and again["pubkey"] == pub
    # The private key there and its public half gone: a run fails, check mode reads "".
    (home / ".ssh" / "id_ed25519.pub").unlink()
    broken = node_keys(run_module, home, etc)
    assert broken.failed and "cannot read the user's public key" in broken["msg"]
    assert node_keys(run_module, home, etc, check_mode=True)["pubkey"] == ""


# --- ssh_mesh_peers ------------------------------------------------------------------------------------


def peers(run_module, home, keys, host_key="host_old", accept=False, check_mode=False, diff=False, **extra):
    args = {"home": str(home), "user": USER, "authorized_keys": [keys["w1"], keys["w2"]],
            "pairs": [{"name": NAME, "key": keys[host_key], "host": "w1"}], "accept_changed": accept}
    args.update(extra)
    return run_module(ssh_mesh_peers, args, check_mode=check_mode, diff=diff)


def test_a_fresh_home_is_set_up_check_mode_first_then_nothing_differs(run_module, tmp_path, keys):
    home = tmp_path / "home"
    home.mkdir()
    ssh = home / ".ssh"
    checked = peers(run_module, home, keys, check_mode=True, diff=True)
    assert checked["changed"] and not ssh.exists()
    assert len(checked["differences"]) == 5  # the directory, the file, two keys, one pin
    assert "%s: missing; created" % ssh in checked["differences"][0]
    assert "%s: pin w1's ssh-ed25519 key under %s" % (ssh / "known_hosts", NAME) in checked["differences"]
    assert [d["after_header"] for d in checked["diff"]] == [str(ssh / "authorized_keys"), str(ssh / "known_hosts")]
    assert checked["diff"][0]["after"] == "%s\n%s\n" % (keys["w1"], keys["w2"])
    done = peers(run_module, home, keys)
    assert done["changed"] and done["differences"] == checked["differences"]
    assert mode(ssh) == 0o700 and mode(ssh / "authorized_keys") == 0o600 and mode(ssh / "known_hosts") == 0o600
    assert (ssh / "authorized_keys").read_text() == "%s\n%s\n" % (keys["w1"], keys["w2"])
    again = peers(run_module, home, keys, diff=True)
    assert not again["changed"] and again["differences"] == [] and "diff" not in again


def test_only_what_differs_is_repaired(run_module, tmp_path, keys):
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    assert peers(run_module, home, keys)["changed"]
    os.chmod(ssh, 0o755)
    (ssh / "authorized_keys").write_text("# mine\n%s" % keys["w2"])  # w1's line gone, no final newline
    os.chmod(ssh / "authorized_keys", 0o644)
    os.chown(ssh / "authorized_keys", UID + 1 if UID == 0 else UID, -1)
    pins = (ssh / "known_hosts").read_text()
    fixed = peers(run_module, home, keys)
    assert fixed["changed"] and fixed["authorized"] == [keys["w1"]] and fixed["added"] == []
    assert any("mode 0755 -> 0700" in line for line in fixed["differences"])
    assert any("mode 0644 -> 0600" in line for line in fixed["differences"])
    assert any("authorize spark@w1's ssh-ed25519 key SHA256:" in line for line in fixed["differences"])
    assert (ssh / "authorized_keys").read_text() == "# mine\n%s\n%s\n" % (keys["w2"], keys["w1"])
    assert mode(ssh) == 0o700 and mode(ssh / "authorized_keys") == 0o600
    assert os.stat(ssh / "authorized_keys").st_uid == UID
    assert (ssh / "known_hosts").read_text() == pins
    assert not peers(run_module, home, keys)["changed"]
    # No key to authorize: authorized_keys is not touched (the lineinfile loop did not run).
    (ssh / "authorized_keys").unlink()
    assert not peers(run_module, home, keys, authorized_keys=[])["changed"]
    assert not (ssh / "authorized_keys").exists()


def test_a_file_where_the_directory_goes_is_refused(run_module, tmp_path, keys):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".ssh").write_text("")
    result = peers(run_module, home, keys)
    assert result.failed and "exists and is not a directory" in result["msg"]


def test_a_changed_host_key_is_refused_until_accepted(run_module, tmp_path, keys):
    home = tmp_path / "home"
    home.mkdir()
    assert peers(run_module, home, keys)["changed"]
    known = home / ".ssh" / "known_hosts"
    before = known.read_text()
    for check_mode in (True, False):
        refused = peers(run_module, home, keys, host_key="host_new", check_mode=check_mode, diff=True)
        assert refused.failed and not refused["changed"] and "diff" not in refused
        for part in ("w1 (%s)" % NAME, "ssh-keygen -R %s -f %s" % (NAME, known), "as %s, " % USER,
                     "ssh_mesh_accept_changed_host_keys=true"):
            assert part in refused["msg"], part
        assert known.read_text() == before
    accepted = peers(run_module, home, keys, host_key="host_new", accept=True)
    assert accepted["changed"] and keys["host_new"].split()[1] in known.read_text()
    assert keys["host_old"].split()[1] not in known.read_text()
    assert "(accepted)" in accepted["differences"][0]
    assert not peers(run_module, home, keys, host_key="host_new")["changed"]


def test_the_check_runs_the_roles_ssh_command_to_each_target_and_reports_each(run_module, tmp_path, keys, monkeypatch):
    bin_dir, log = tmp_path / "bin", tmp_path / "ssh.log"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\necho \"$@\" >> %s\ncase \"$*\" in *@10.89.77.13*) "
                                 "echo 'Permission denied (publickey).' >&2; exit 255;; esac\nexit 0\n" % log)
    os.chmod(bin_dir / "ssh", 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    home = tmp_path / "home"
    home.mkdir()
    targets = [{"name": "w1", "address": NAME}, {"name": "w2", "address": "10.89.77.13"}]
    for check_mode in (False, True):
        result = peers(run_module, home, keys, verify=True, verify_targets=targets, connect_timeout=7,
                       check_mode=check_mode)
        assert not result.failed
        assert [(c["item"], c["address"], c["rc"]) for c in result["checks"]] == [
            ("w1", NAME, 0), ("w2", "10.89.77.13", 255)]
        assert "Permission denied" in result["checks"][1]["stderr"]
    lines = log.read_text().splitlines()
    assert lines[0] == "-o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=7 %s@%s true" % (USER, NAME)
    assert len(lines) == 4
    assert peers(run_module, home, keys)["checks"] == []


def test_a_host_key_that_is_not_text_fails_the_read(run_module, tmp_path):
    home, etc = tmp_path / "home", tmp_path / "etc"
    (home / ".ssh").mkdir(parents=True)
    etc.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    (etc / "ssh_host_ed25519_key.pub").write_bytes(b"\xff\xfe")
    result = node_keys(run_module, home, etc)
    assert result.failed and "is not text" in result["msg"]
