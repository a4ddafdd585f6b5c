import os

from ansible_collections.laguna.spark.plugins.module_utils import systemd_run as sr
from ansible_collections.laguna.spark.plugins.modules import systemd_run_service


ARGS = {
    "name": "laguna-ray-head",
    "command": ["/venv/bin/ray", "start", "--head", "--block"],
    "environment": {"NCCL_IB_GID_INDEX": 3, "VLLM_HOST_IP": "192.168.100.10"},
    "properties": {"LimitMEMLOCK": "infinity", "MemoryMax": "110G", "MemorySwapMax": 0},
    "description": "laguna ray head",
    "settle": 0,
}


def test_starts_a_user_service_with_env_and_properties(systemd, run_module):
    result = run_module(systemd_run_service, ARGS)
    assert result["changed"] and result["action"] == "started"
    argv = systemd.calls("systemd-run")[0]
    assert argv[1:3] == ["--user", "--unit=laguna-ray-head"]
    assert "--property=LimitMEMLOCK=infinity" in argv and "--property=MemorySwapMax=0" in argv
    assert "--setenv=NCCL_IB_GID_INDEX=3" in argv
    assert "--scope" not in argv
    assert argv[argv.index("--") + 1:] == ARGS["command"]
    assert "[cfg %s]" % result["fingerprint"] in systemd.read()["units"]["laguna-ray-head.service"]["Description"]


def test_same_configuration_is_left_running(systemd, run_module):
    run_module(systemd_run_service, ARGS)
    again = run_module(systemd_run_service, ARGS)
    assert not again["changed"] and again["action"] == "none"
    assert len(systemd.calls("systemd-run")) == 1


def test_changed_environment_restarts(systemd, run_module):
    first = run_module(systemd_run_service, ARGS)
    drifted = dict(ARGS, environment=dict(ARGS["environment"], NCCL_IB_GID_INDEX=5))
    result = run_module(systemd_run_service, drifted)
    assert result["changed"] and result["action"] == "restarted"
    assert result["previous_fingerprint"] == first["fingerprint"] != result["fingerprint"]
    assert ["systemctl", "--user", "stop", "laguna-ray-head.service"] in systemd.read()["calls"]


def test_check_mode_changes_nothing(systemd, run_module):
    result = run_module(systemd_run_service, ARGS, check_mode=True)
    assert result["changed"] and result["argv"][0].endswith("systemd-run")
    assert systemd.calls("systemd-run") == []


def test_a_service_that_dies_at_once_fails_with_its_logs(systemd, run_module):
    result = run_module(systemd_run_service, dict(ARGS, command=["false"]))
    assert result.failed and "stopped right after starting" in result["msg"]
    assert "exit status 1" in result["msg"]


def test_failed_unit_is_replaced(systemd, run_module):
    run_module(systemd_run_service, dict(ARGS, command=["false"]))
    result = run_module(systemd_run_service, ARGS)
    assert result["changed"] and result["action"] == "started"


def test_stopped_is_idempotent(systemd, run_module):
    run_module(systemd_run_service, ARGS)
    stop = run_module(systemd_run_service, {"name": "laguna-ray-head", "state": "stopped"})
    again = run_module(systemd_run_service, {"name": "laguna-ray-head", "state": "stopped"})
    assert stop["changed"] and stop["action"] == "stopped"
    assert not again["changed"]


def test_restarted_always_restarts(systemd, run_module):
    run_module(systemd_run_service, ARGS)
    result = run_module(systemd_run_service, dict(ARGS, state="restarted"))
    assert result["changed"] and result["action"] == "restarted"
    assert len(systemd.calls("systemd-run")) == 2


def test_fingerprint_is_stable_and_sensitive():
    base = sr.fingerprint(["a", "b"], {"X": "1"}, {"P": "1"})
    assert base == sr.fingerprint(["a", "b"], {"X": "1"}, {"P": "1"})
    assert base != sr.fingerprint(["a", "c"], {"X": "1"}, {"P": "1"})
    assert base != sr.fingerprint(["a", "b"], {"X": "1"}, {"P": "2"})
    assert sr.fingerprint_of(sr.description("x", base)) == base
    assert sr.fingerprint_of("no fingerprint") is None


def test_check_mode_without_a_user_manager_predicts_a_start(systemd, run_module, monkeypatch, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus: No such file or directory' >&2\nexit 1\n")
    (broken / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (broken, os.environ["PATH"]))
    result = run_module(systemd_run_service, ARGS, check_mode=True)
    assert result["changed"] and result["action"] == "started"
    assert "no user manager" in str(result.get("warnings"))
    assert run_module(systemd_run_service, ARGS).failed
