"""known_hosts: parsing (plain, hashed, markers), fingerprints as ssh-keygen prints them, the pin
plan (add, keep, a changed key refused or replaced), and the ssh_known_hosts_pin module's file
handling (check mode, diff, mode and idempotence); the filter that builds the pairs from hostvars."""
import os
import subprocess

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import known_hosts as kh
from ansible_collections.laguna.spark.plugins.modules import ssh_known_hosts_pin

from helpers.filters import run_filter

NAME = "10.89.77.12"


def keygen(tmp_path, name, kind="ed25519"):
    """A real key made by ssh-keygen: (public key text 'type base64 comment', its `ssh-keygen -lf` fingerprint)."""
    path = tmp_path / name
    args = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "root@" + name, "-f", str(path)]
    if kind == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True)
    pub = (tmp_path / (name + ".pub")).read_text().strip()
    printed = subprocess.run(["ssh-keygen", "-lf", str(path) + ".pub"], check=True, capture_output=True,
                             text=True).stdout.split()
    assert printed[1].startswith("SHA256:")
    return pub, printed[1]


def bare(pub):
    return " ".join(pub.split()[:2])


@pytest.fixture
def keys(tmp_path):
    """Two ed25519 keys (the old and the new one of a host) and an ecdsa key."""
    return {"old": keygen(tmp_path, "old"), "new": keygen(tmp_path, "new"), "ecdsa": keygen(tmp_path, "ec", "ecdsa")}


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_fingerprint_is_what_ssh_keygen_prints(tmp_path, kind):
    pub, printed = keygen(tmp_path, "k", kind)
    assert kh.fingerprint(pub.split()[1]) == printed
    assert kh.parse_key(pub) == tuple(pub.split()[:2])


def test_a_key_whose_data_is_not_its_type_is_refused(keys):
    pub = keys["old"][0]
    with pytest.raises(kh.BadKey, match="says ssh-ed25519"):
        kh.parse_key("ssh-rsa " + pub.split()[1])
    with pytest.raises(kh.BadKey):
        kh.parse_key("ssh-ed25519 not-base64!")
    with pytest.raises(kh.BadKey):
        kh.parse_key("ssh-ed25519")


def test_parse_keeps_every_kind_of_line(keys):
    old = bare(keys["old"][0])
    hashed = kh.hash_name(NAME, b"0123456789abcdefghij")
    text = ("# a comment\n\n"
            "10.89.77.12,laguna-worker %s\n"
            "%s %s trailing comment\n"
            "@cert-authority *.example.org %s\n"
            "@revoked 10.89.77.12 %s\n"
            "10.89.77.* %s\n"
            "garbage\n" % (old, hashed, old, old, old, old))
    lines = kh.parse(text)
    assert [line.kind for line in lines] == ["comment", "blank", "plain", "hashed", "marker", "marker", "plain",
                                             "other"]
    assert lines[2].patterns == ["10.89.77.12", "laguna-worker"] and lines[2].key == old.split()[1]
    assert lines[3].rest == "trailing comment"
    # Only the exact names match: plain (any case), hashed; markers and wildcards never do.
    assert [line.matches(NAME) for line in lines] == [False, False, True, True, False, False, False, False]
    assert lines[2].matches("LAGUNA-WORKER") and not lines[2].matches("laguna")


def test_hashed_names_match_as_openssh_hashes_them(tmp_path, keys):
    """ssh-keygen -H hashes a file; each hashed line matches its own name only (HMAC-SHA1)."""
    path = tmp_path / "known_hosts"
    path.write_text("%s %s\nother.example %s\n" % (NAME, bare(keys["old"][0]), bare(keys["ecdsa"][0])))
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(path)], check=True, capture_output=True)
    lines = kh.parse(path.read_text())
    assert [line.kind for line in lines] == ["hashed", "hashed"]
    assert lines[0].matches(NAME) and not lines[0].matches("other.example")
    assert lines[1].matches("other.example") and not lines[1].matches(NAME)
    assert kh.pattern_matches(kh.hash_name(NAME, os.urandom(20)), NAME)


def test_plan_adds_keeps_and_is_a_no_op_when_pinned(keys):
    old, ecdsa = bare(keys["old"][0]), bare(keys["ecdsa"][0])
    pairs = [{"name": NAME, "key": keys["old"][0], "host": "laguna-worker"}, {"name": NAME, "key": ecdsa}]
    first = kh.plan("# mine\n", pairs)
    assert first.writes and first.after == "# mine\n%s %s\n%s %s\n" % (NAME, old, NAME, ecdsa)
    assert [a["fingerprint"] for a in first.added] == [keys["old"][1], keys["ecdsa"][1]]
    again = kh.plan(first.after, pairs + pairs)  # repeats are one pin
    assert not again.writes and again.added == [] and len(again.kept) == 2 and again.changed == []


def test_a_file_without_a_final_newline_gets_one_before_the_new_line(keys):
    plan = kh.plan("# mine", [{"name": NAME, "key": keys["old"][0]}])
    assert plan.after == "# mine\n%s %s\n" % (NAME, bare(keys["old"][0]))


def test_a_changed_key_is_refused_naming_host_both_fingerprints_and_fixes(keys):
    text = "# mine\n%s %s\n" % (NAME, bare(keys["old"][0]))
    plan = kh.plan(text, [{"name": NAME, "key": keys["new"][0], "host": "laguna-worker"}])
    assert plan.after == text and not plan.writes
    assert [c.as_dict() for c in plan.refused] == [{
        "host": "laguna-worker", "name": NAME, "type": "ssh-ed25519",
        "old_fingerprint": keys["old"][1], "new_fingerprint": keys["new"][1]}]
    message = kh.refusal(plan, "/home/spark/.ssh/known_hosts", "spark")
    for part in ("laguna-worker (10.89.77.12)", keys["old"][1], keys["new"][1],
                 "ssh-keygen -R 10.89.77.12 -f /home/spark/.ssh/known_hosts", "as spark",
                 "-e ssh_mesh_accept_changed_host_keys=true"):
        assert part in message, part


def test_another_key_type_for_the_name_is_added_not_changed(keys):
    text = "%s %s\n" % (NAME, bare(keys["old"][0]))
    plan = kh.plan(text, [{"name": NAME, "key": keys["ecdsa"][0]}])
    assert plan.refused == [] and len(plan.added) == 1


def test_accepted_change_replaces_the_old_key_in_place(keys):
    old, new = bare(keys["old"][0]), bare(keys["new"][0])
    hashed = kh.hash_name(NAME, b"0123456789abcdefghij")
    text = "# mine\n%s %s\nother %s\n%s %s\n" % (NAME, old, old, hashed, old)
    plan = kh.plan(text, [{"name": NAME, "key": new}], accept_changed=True)
    assert plan.refused == [] and len(plan.changed) == 1
    # The plain and the hashed line of that name get the new key; the hashed one stays hashed;
    # another name with the same key is left alone.
    assert plan.after == "# mine\n%s %s\nother %s\n%s %s\n" % (NAME, new, old, hashed, new)
    assert kh.plan(plan.after, [{"name": NAME, "key": new}]).writes is False


def test_accepted_change_takes_the_name_off_a_shared_line(keys):
    old, new = bare(keys["old"][0]), bare(keys["new"][0])
    text = "%s,laguna-worker %s\n" % (NAME, old)
    plan = kh.plan(text, [{"name": NAME, "key": new}], accept_changed=True)
    assert plan.after == "laguna-worker %s\n%s %s\n" % (old, NAME, new)
    # Both names of the line changed to the same key: replaced in place.
    both = kh.plan(text, [{"name": NAME, "key": new}, {"name": "laguna-worker", "key": new}],
                   accept_changed=True)
    assert both.after == "%s,laguna-worker %s\n" % (NAME, new)


def test_markers_and_wildcards_are_never_changed(keys):
    old, new = bare(keys["old"][0]), bare(keys["new"][0])
    text = "@revoked %s %s\n@cert-authority * %s\n10.89.77.* %s\n" % (NAME, old, old, old)
    plan = kh.plan(text, [{"name": NAME, "key": new}])
    assert plan.refused == [] and plan.after == text + "%s %s\n" % (NAME, new)


def test_the_pair_builder_drops_repeats_and_comments(keys):
    pairs = kh.peer_pairs("w", [NAME, NAME, "laguna-worker"], [keys["old"][0], keys["ecdsa"][0]])
    assert [(p["name"], p["key"]) for p in pairs] == [
        (NAME, bare(keys["old"][0])), (NAME, bare(keys["ecdsa"][0])),
        ("laguna-worker", bare(keys["old"][0])), ("laguna-worker", bare(keys["ecdsa"][0]))]
    assert {p["host"] for p in pairs} == {"w"}


def test_the_filter_reads_only_the_peers_addresses_and_keys(keys):
    hostvars = {"head": {"laguna_roce_ip": "10.89.77.11", "ssh_mesh_hostkeys": [keys["ecdsa"][0]]},
                "worker": {"laguna_roce_ip": NAME, "ansible_host": "laguna-worker",
                           "ssh_mesh_hostkeys": [keys["old"][0]], "vllm_serve_api_key": "secret"},
                "fresh": {"laguna_roce_ip": "10.89.77.13", "ansible_host": "fresh"}}
    pairs, no_host, unknown = run_filter("known_host_pairs", "known_host_pairs", [
        [["worker", "fresh"], hostvars, ["ansible_host"]],  # fresh has no host key yet
        [["head"], hostvars, ["ansible_host"]],
        [["nope"], hostvars]])
    assert pairs == [{"host": "worker", "name": NAME, "key": bare(keys["old"][0])},
                     {"host": "worker", "name": "laguna-worker", "key": bare(keys["old"][0])}]
    # AnsibleFilterError (ansible-core 2.19 names its class AnsibleTemplatePluginError).
    assert no_host.startswith("Ansible") and no_host.endswith(": known_host_pairs: head has no ansible_host")
    assert unknown.endswith(": known_host_pairs: nope is not in the inventory")


# --- the module -------------------------------------------------------------------------------------


def pin(run_module, path, pairs, accept=False, check_mode=False, diff=False):
    return run_module(ssh_known_hosts_pin, {"path": str(path), "pairs": pairs, "accept_changed": accept},
                      check_mode=check_mode, diff=diff)


def test_module_adds_then_changes_nothing_and_keeps_the_file_private(run_module, tmp_path, keys):
    path = tmp_path / "ssh" / "known_hosts"
    pairs = [{"name": NAME, "key": keys["old"][0], "host": "laguna-worker"}]
    checked = pin(run_module, path, pairs, check_mode=True, diff=True)
    assert checked["changed"] and not path.exists() and not path.parent.exists()
    assert checked["diff"]["after"] == "%s %s\n" % (NAME, bare(keys["old"][0]))
    first = pin(run_module, path, pairs)
    assert first["changed"] and first["added"] == [{"host": "laguna-worker", "name": NAME, "type": "ssh-ed25519",
                                                    "fingerprint": keys["old"][1]}]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    # OpenSSH finds it.
    found = subprocess.run(["ssh-keygen", "-F", NAME, "-f", str(path)], capture_output=True, text=True, check=False)
    assert found.returncode == 0 and keys["old"][0].split()[1] in found.stdout
    second = pin(run_module, path, pairs, diff=True)
    assert not second["changed"] and second["kept"] and second["diff"]["before"] == second["diff"]["after"]


def test_module_refuses_a_changed_key_and_writes_nothing(run_module, tmp_path, keys):
    path = tmp_path / "known_hosts"
    text = "# mine\n%s %s\n" % (NAME, bare(keys["old"][0]))
    path.write_text(text)
    path.chmod(0o600)
    before = path.stat()
    pairs = [{"name": NAME, "key": keys["new"][0], "host": "laguna-worker"}]
    for check_mode in (True, False):
        result = pin(run_module, path, pairs, check_mode=check_mode, diff=True)
        assert result.failed and not result["changed"] and "diff" not in result
        assert result["changed_keys"] == [{"host": "laguna-worker", "name": NAME, "type": "ssh-ed25519",
                                           "old_fingerprint": keys["old"][1], "new_fingerprint": keys["new"][1]}]
        for part in ("laguna-worker (10.89.77.12)", keys["old"][1], keys["new"][1],
                     "ssh-keygen -R 10.89.77.12 -f %s" % path, "ssh_mesh_accept_changed_host_keys=true"):
            assert part in result["msg"], part
    assert path.read_text() == text and path.stat().st_mtime_ns == before.st_mtime_ns


def test_module_replaces_an_accepted_key_keeping_mode_and_is_idempotent(run_module, tmp_path, keys):
    path = tmp_path / "known_hosts"
    path.write_text("# mine\n%s %s\n" % (NAME, bare(keys["old"][0])))
    path.chmod(0o640)
    pairs = [{"name": NAME, "key": keys["new"][0], "host": "laguna-worker"}]
    checked = pin(run_module, path, pairs, accept=True, check_mode=True, diff=True)
    assert checked["changed"] and bare(keys["old"][0]) in path.read_text()
    assert checked["diff"]["after"] == "# mine\n%s %s\n" % (NAME, bare(keys["new"][0]))
    result = pin(run_module, path, pairs, accept=True)
    assert result["changed"] and result["changed_keys"][0]["new_fingerprint"] == keys["new"][1]
    assert path.read_text() == "# mine\n%s %s\n" % (NAME, bare(keys["new"][0]))
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    assert not pin(run_module, path, pairs)["changed"]
    assert not pin(run_module, path, pairs, accept=True)["changed"]


def test_the_ssh_keygen_fix_lets_the_next_run_pin_the_new_key(run_module, tmp_path, keys):
    path = tmp_path / "known_hosts"
    path.write_text("%s %s\n" % (NAME, bare(keys["old"][0])))
    pairs = [{"name": NAME, "key": keys["new"][0]}]
    assert pin(run_module, path, pairs).failed
    subprocess.run(["ssh-keygen", "-R", NAME, "-f", str(path)], check=True, capture_output=True)
    result = pin(run_module, path, pairs)
    assert result["changed"] and [a["fingerprint"] for a in result["added"]] == [keys["new"][1]]


def test_module_fails_on_a_key_that_is_not_one(run_module, tmp_path):
    result = pin(run_module, tmp_path / "known_hosts", [{"name": NAME, "key": "ssh-ed25519 AAAA"}])
    assert result.failed and "is not a ssh-ed25519 public key" in result["msg"]
    assert not (tmp_path / "known_hosts").exists()
