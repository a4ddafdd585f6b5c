"""roles/laguna/tasks/validate.yml through ansible-runner on localhost: a bad
configuration is refused, naming the variable, before anything restarts."""
import getpass
import json
import os
import socket
import sys

import ansible_runner
import pytest

from helpers import DOUBLES
from helpers.collection import collections_path
from helpers.fake_bin import systemd_on_path

COLLECTIONS = collections_path()

pytestmark = pytest.mark.integration

LOCAL = "ansible_connection=local ansible_python_interpreter=%s" % sys.executable


def run(tmp_path, extra=(), hosts=None, extravars=None, name="run"):
    """validate.yml, then a task standing in for a restart (it touches a marker per host)."""
    hosts = hosts or {"spark-1": "laguna_roce_ip=127.0.0.1"}
    data = tmp_path / name
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    names = list(hosts)
    line = {h: "%s %s %s" % (h, "" if "ansible_connection=" in hosts[h] else LOCAL, hosts[h]) for h in names}
    (data / "inventory" / "hosts").write_text(
        "[spark_head]\n%s\n[spark_workers]\n%s\n" % (line[names[0]], "\n".join(line[h] for h in names[1:])))
    (data / "project" / "play.yml").write_text("""
- hosts: spark_head:spark_workers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: laguna.spark.laguna
        tasks_from: validate
    - name: Restart (stand-in)
      ansible.builtin.file:
        path: "%s/restarted-{{ inventory_hostname }}"
        state: touch
    - name: Keep what config_check returned
      ansible.builtin.copy:
        content: "{{ laguna_config_check | to_json }}"
        dest: "%s/check-{{ inventory_hostname }}.json"
        mode: "0644"
""" % (tmp_path, tmp_path))
    result = ansible_runner.run(
        private_data_dir=str(data), playbook="play.yml",
        extravars=dict({"laguna_user": getpass.getuser()}, **(extravars or {})),
        cmdline=" ".join(extra) or None, quiet=True,
        envvars={"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_NOCOLOR": "1"})
    result.text = result.stdout.read()
    result.flat = " ".join(result.text.split())
    result.restarted = sorted(p.name[len("restarted-"):] for p in tmp_path.glob("restarted-*"))
    return result


def test_a_good_configuration_passes_and_e_strings_are_coerced(tmp_path):
    result = run(tmp_path, ["-e", "laguna_gpus_per_node=1", "-e", "vllm_serve_num_speculative_tokens=6",
                            "-e", "preflight_min_free_gb=122", "-e", "preflight_check_roce=false"])
    assert result.rc == 0, result.text
    assert result.restarted == ["spark-1"]
    check = json.loads((tmp_path / "check-spark-1.json").read_text())
    assert sorted(check["coerced"]) == ["laguna_gpus_per_node", "preflight_check_roce", "preflight_min_free_gb",
                                        "vllm_serve_num_speculative_tokens"]
    config = check["config"]
    assert config["vllm_serve_num_speculative_tokens"] == 6 and config["preflight_check_roce"] is False


BAD = [
    (["-e", "vllm_serve_num_speculative_tokens=0"],
     "vllm_serve_num_speculative_tokens='0': below the minimum 1; expected int, between 1 and 32."),
    (["-e", "vllm_serve_kv_cache_memory_bytes=-5368709120"],
     "vllm_serve_kv_cache_memory_bytes='-5368709120': below the minimum 1; expected int, >= 1."),
    (["-e", "laguna_api_port=80000"], "laguna_api_port='80000': above the maximum 65535"),
    (["-e", "laguna_gpus_per_node=one"], "laguna_gpus_per_node='one': expected int"),
    (["-e", "vllm_serve_num_speculative_token=4"],
     "vllm_serve_num_speculative_token is not a variable of laguna.spark (did you mean vllm_serve_num_speculative_tokens?)"),
]


def test_bad_values_are_refused_by_name_before_anything_restarts(tmp_path):
    """One run with all of them: each is named in the one refusal."""
    result = run(tmp_path, [arg for extra, _expected in BAD for arg in extra])
    assert result.rc != 0
    assert "Configuration refused, nothing was changed: " in result.flat
    for _extra, expected in BAD:
        assert expected in result.flat, (expected, result.flat[-3000:])
    assert result.restarted == []


def test_duplicate_or_missing_roce_addresses_are_refused(tmp_path):
    result = run(tmp_path, hosts={"spark-1": "laguna_roce_ip=127.0.0.1", "spark-2": "laguna_roce_ip=127.0.0.1",
                                  "spark-3": ""})
    assert result.rc != 0
    assert "laguna_roce_ip 127.0.0.1 is given to 2 hosts (spark-1, spark-2); each node needs its own." in result.flat
    assert "spark-3 has no laguna_roce_ip (its IPv4 address on the RoCE link)." in result.flat
    assert result.restarted == []


@pytest.fixture
def running_tp2(tmp_path, monkeypatch):
    """A fake `systemctl --user` on PATH whose laguna-vllm unit runs at --tensor-parallel-size 2."""
    systemd_on_path(monkeypatch, tmp_path / "fake-bin", os.path.join(DOUBLES, "fake_systemd", "fake_systemd.py"),
                    ["systemctl"])
    state = tmp_path / "systemd.json"
    state.write_text(json.dumps({"calls": [], "units": {"laguna-vllm.service": {
        "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": "4242",
        "Description": "laguna-spark vllm serve laguna-s-fp8 (TP 2) [cfg 0123456789ab]",
        "ExecStart": "{ path=/v/bin/vllm ; argv[]=/v/bin/vllm serve /m --tensor-parallel-size 2 ; pid=4242 }"}}}))
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(state))


def test_one_host_against_a_running_tp2_is_refused_unless_allowed(tmp_path, running_tp2):
    result = run(tmp_path)
    assert result.rc != 0
    assert "laguna-vllm on" in result.flat
    assert "is serving with --tensor-parallel-size 2; this run would restart it with 1 (1 node(s) x 1 GPU(s)" in result.flat
    assert "laguna_allow_shrink: true" in result.flat
    assert result.restarted == []
    allowed = run(tmp_path, ["-e", "laguna_allow_shrink=true"], name="allowed")
    assert allowed.rc == 0, allowed.text
    assert allowed.restarted == ["spark-1"]


def test_two_hosts_against_a_running_tp2_pass(tmp_path, running_tp2):
    result = run(tmp_path, hosts={"spark-1": "laguna_roce_ip=127.0.0.1", "spark-2": "laguna_roce_ip=127.0.0.2"})
    assert result.rc == 0, result.text
    assert result.restarted == ["spark-1", "spark-2"]


def test_a_sudo_failure_is_explained(tmp_path):
    sudo = tmp_path / "sudo"
    sudo.write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    sudo.chmod(0o755)
    result = run(tmp_path, extravars={"laguna_user": "nobody", "ansible_become_exe": str(sudo)})
    assert result.rc != 0
    assert ("spark-1: cannot become nobody: sudo on spark-1 asks the connecting user for a password and none "
            "was given. Fix: run with --ask-become-pass (-K)") in result.flat
    assert result.restarted == []


def test_an_unreachable_node_is_explained(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = "ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=%d laguna_roce_ip=127.0.0.2" % port
    result = run(tmp_path, hosts={"spark-1": "laguna_roce_ip=127.0.0.1", "spark-2": worker})
    assert result.rc != 0
    assert "the controller cannot SSH to spark-2 (127.0.0.1) as" in result.flat, result.flat[-3000:]
    assert "127.0.0.1 answers but nothing listens on the SSH port (sshd stopped?). Fix: start sshd on spark-2" in result.flat
    assert result.restarted == ["spark-1"]
