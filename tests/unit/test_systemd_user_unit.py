"""systemd_user_unit against the fake systemctl (tests/doubles/fake_systemd)."""
from ansible_collections.laguna.spark.plugins.module_utils import systemd_user as su
from ansible_collections.laguna.spark.plugins.modules import systemd_run_service, systemd_user_unit

SERVICE = {
    "name": "laguna-ray-head",
    "command": ["/venv/bin/ray", "start", "--head", "--block"],
    "environment": {"NCCL_IB_GID_INDEX": 3, "VLLM_HOST_IP": "192.168.100.10", "NOTE": "two words"},
    "properties": {"MemoryMax": "110G"},
    "settle": 0,
}


def test_reports_a_running_unit_with_its_environment(systemd, run_module):
    started = run_module(systemd_run_service, SERVICE)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head"})
    assert not result["changed"] and result["action"] == "none"
    assert result["unit"] == "laguna-ray-head.service"
    assert result["user_manager"] and result["exists"] and result["running"]
    assert (result["active_state"], result["sub_state"], result["result"]) == ("active", "running", "success")
    assert result["main_pid"] == started["main_pid"] > 0
    assert result["exec_main_status"] == 0
    assert result["environment"] == {"NCCL_IB_GID_INDEX": "3", "VLLM_HOST_IP": "192.168.100.10", "NOTE": "two words"}
    assert "[cfg %s]" % started["fingerprint"] in result["description"]
    show = systemd.calls("systemctl")[-1]
    assert show[:4] == ["systemctl", "--user", "show", "laguna-ray-head.service"]


def test_reports_a_missing_unit(systemd, run_module):
    result = run_module(systemd_user_unit, {"name": "laguna-vllm", "properties": ["MemoryMax"]})
    assert not result["changed"] and not result["exists"] and not result["running"]
    assert (result["load_state"], result["active_state"]) == ("not-found", "inactive")
    assert result["main_pid"] == 0 and result["environment"] == {}
    assert "MemoryMax" in result["properties"]
    assert "--property=" + ",".join(su.DEFAULT_PROPERTIES + ("MemoryMax",)) in systemd.calls("systemctl")[-1]


def test_reports_a_failed_unit_with_its_exit_status(systemd, run_module):
    run_module(systemd_run_service, dict(SERVICE, command=["false"]))
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head.service"})
    assert (result["active_state"], result["result"], result["exec_main_status"]) == ("failed", "exit-code", 1)
    assert result["exists"] and not result["running"]


def test_query_without_a_user_manager_does_not_fail(systemd, run_module, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMD_NO_MANAGER", "1")
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head"})
    assert not result.failed and not result["user_manager"]
    assert result["active_state"] == "unknown" and not result["running"]
    assert "Failed to connect to bus" in result["user_manager_error"]


def test_a_change_without_a_user_manager_fails(systemd, run_module, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMD_NO_MANAGER", "1")
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "stopped"})
    assert result.failed and "loginctl enable-linger" in result["msg"]
    checked = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "stopped"}, check_mode=True)
    assert not checked.failed and not checked["changed"] and "no user manager" in str(checked["warnings"])


def test_stop_then_stop_again(systemd, run_module):
    run_module(systemd_run_service, SERVICE)
    stop = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "stopped"}, diff=True)
    assert stop["changed"] and stop["action"] == "stopped" and not stop["running"]
    assert stop["diff"]["before"] == "ActiveState=active\n" and stop["diff"]["after"] == "ActiveState=inactive\n"
    assert ["systemctl", "--user", "stop", "laguna-ray-head.service"] in systemd.read()["calls"]
    again = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "stopped"})
    assert not again["changed"] and again["action"] == "none"


def test_stopping_a_failed_unit_clears_it(systemd, run_module):
    run_module(systemd_run_service, dict(SERVICE, command=["false"]))
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "stopped"})
    assert result["changed"]
    assert "laguna-ray-head.service" not in systemd.read()["units"]


def test_check_mode_predicts_and_changes_nothing(systemd, run_module):
    run_module(systemd_run_service, SERVICE)
    pid = systemd.read()["units"]["laguna-ray-head.service"]["MainPID"]
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "restarted"}, check_mode=True, diff=True)
    assert result["changed"] and result["action"] == "restarted" and result["active_state"] == "active"
    assert not [c for c in systemd.calls("systemctl") if c[2] in ("restart", "stop", "start")]
    assert systemd.read()["units"]["laguna-ray-head.service"]["MainPID"] == pid


def test_restart_gives_a_new_main_pid(systemd, run_module):
    started = run_module(systemd_run_service, SERVICE)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "restarted"})
    assert result["changed"] and result["action"] == "restarted" and result["running"]
    assert result["main_pid"] not in (0, started["main_pid"])


def test_started_leaves_a_running_unit_alone(systemd, run_module):
    run_module(systemd_run_service, SERVICE)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "started"})
    assert not result["changed"] and result["action"] == "none"
    assert not [c for c in systemd.calls("systemctl") if c[2] == "start"]


def test_starting_a_stopped_unit_that_dies_fails_with_its_state(systemd, run_module):
    run_module(systemd_run_service, dict(SERVICE, command=["false"]))
    systemd_state = systemd.read()
    assert systemd_state["units"]["laguna-ray-head.service"]["ActiveState"] == "failed"
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "started"})
    assert result.failed and "did not stay up" in result["msg"] and "exit status 1" in result["msg"]


def test_starting_a_gone_transient_unit_fails(systemd, run_module):
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head", "state": "started"})
    assert result.failed and "not loaded" in result["msg"]


def test_parse_environment_and_decisions():
    assert su.parse_environment('A=1 "B=two words" C=') == {"A": "1", "B": "two words", "C": ""}
    assert su.parse_environment("") == {}
    assert su.unit_name("x") == "x.service" and su.unit_name("x.scope") == "x.scope"
    assert su.decide({"ActiveState": "active"}, "started") == "none"
    assert su.decide({"ActiveState": "inactive"}, "restarted") == "started"
    assert su.decide({"ActiveState": "failed"}, "stopped") == "stopped"
    assert su.decide({"ActiveState": "inactive"}, "stopped") == "none"
