"""systemd_user_unit against the fake systemctl (tests/doubles/fake_systemd)."""
import json
import os
import subprocess

import pytest
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


def test_reports_a_unit_waiting_for_its_restart_as_restarting_not_running(systemd, run_module):
    # A persistent unit whose process exited (Restart=always) waits
    # RestartSec in activating/auto-restart: systemd starts it by itself.
    run_module(systemd_run_service, SERVICE)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head"})
    assert result["running"] and not result["restarting"]
    state = systemd.read()
    state["units"]["laguna-ray-head.service"].update(ActiveState="activating", SubState="auto-restart", MainPID="0")
    with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as handle:
        json.dump(state, handle)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head"})
    assert result["restarting"] and not result["running"] and result["active_state"] == "activating"
    assert not run_module(systemd_user_unit, {"name": "laguna-vllm"})["restarting"]


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


# --- Comparing a unit with what the inventory wants (expect_*, drift) ---
#
# Real `systemctl --user show` output, captured with systemd 252
# (252.38-1~deb12u1, Debian 12) on the development container, 2026-12-03: a
# `systemd --user` manager run in a private mount namespace (systemd is not
# PID 1 there), then
#   systemd-run --user --unit=laguna-probe --description='laguna probe [cfg 1234]'
#     --property=MemoryMax=98G --property=MemorySwapMax=0 --property=LimitMEMLOCK=infinity
#     --setenv=NCCL_IB_GID_INDEX=3 --setenv=VLLM_HOST_IP=192.168.100.10 '--setenv=NOTE=two words'
#     '--setenv=DOLLAR=$HOME' '--setenv=TICK=a`b' '--setenv=BACK=a\b' '--setenv=TAB=a<tab>b'
#     '--setenv=JSON={"a": "b"}'
#     -- /tmp/laguna-probe/venv/bin/vllm serve /home/spark/models/hf/X --speculative-config
#        '{"method":"dflash","model":"/home/spark/models/hf/X","num_speculative_tokens":6}'
#        --served-model-name 'two words' --port 8000
#   systemctl --user show laguna-probe.service -p ActiveState -p LoadState -p ExecStart -p MemoryMax
#     -p MemorySwapMax -p MemoryHigh -p LimitMEMLOCK -p Environment
# systemctl prints argv joined by single spaces, unquoted (strv_join in
# src/systemctl/systemctl-show.c), and each Environment string through
# shell_maybe_quote() (src/basic/escape.c).
REAL_TRANSIENT = (
    'ExecStart={ path=/tmp/laguna-probe/venv/bin/vllm ; argv[]=/tmp/laguna-probe/venv/bin/vllm serve '
    '/home/spark/models/hf/X --speculative-config '
    '{"method":"dflash","model":"/home/spark/models/hf/X","num_speculative_tokens":6} '
    '--served-model-name two words --port 8000 ; ignore_errors=no ; '
    'start_time=[Thu 2026-12-03 14:52:52 UTC] ; stop_time=[n/a] ; pid=5129 ; code=(null) ; status=0/0 }\n'
    'MemoryHigh=infinity\n'
    'MemoryMax=105226698752\n'
    'MemorySwapMax=0\n'
    'Environment=NCCL_IB_GID_INDEX=3 VLLM_HOST_IP=192.168.100.10 "NOTE=two words" "DOLLAR=\\$HOME" '
    '"TICK=a\\`b" "BACK=a\\\\b" "TAB=a\\tb" "JSON={\\"a\\": \\"b\\"}"\n'
    'LimitMEMLOCK=infinity\n'
    'LoadState=loaded\n'
    'ActiveState=active\n')
REAL_ARGV = ["/tmp/laguna-probe/venv/bin/vllm", "serve", "/home/spark/models/hf/X", "--speculative-config",
             '{"method":"dflash","model":"/home/spark/models/hf/X","num_speculative_tokens":6}',
             "--served-model-name", "two words", "--port", "8000"]
REAL_ENVIRONMENT = {"NCCL_IB_GID_INDEX": "3", "VLLM_HOST_IP": "192.168.100.10", "NOTE": "two words",
                    "DOLLAR": "$HOME", "TICK": "a`b", "BACK": "a\\b", "TAB": "a\tb", "JSON": '{"a": "b"}'}
# The same machine: a unit from a unit file (ExecStart= with quoted
# arguments, Environment=, MemoryMax=110G, MemoryHigh=100G), started with
# `systemctl --user start`; `-p ExecStartEx` of it; and a unit that does not
# exist (systemctl prints no ExecStart for it).
REAL_UNIT_FILE_ENVIRONMENT = (
    'Environment=NCCL_IB_GID_INDEX=3 "NOTE=two words" "DOLLAR=\\$\\$HOME" RAY_ADDRESS=192.168.100.10:6379 '
    '"JSON={\\"a\\": \\"b\\"}"')
REAL_UNIT_FILE_SIZES = "MemoryHigh=107374182400\nMemoryMax=118111600640\nMemorySwapMax=0\nLimitMEMLOCK=infinity\n"
REAL_EXEC_START_EX = (
    'ExecStartEx={ path=/tmp/laguna-probe/venv/bin/vllm ; argv[]=/tmp/laguna-probe/venv/bin/vllm serve '
    '/home/spark/models/hf/X --speculative-config '
    '{"method":"dflash","model":"/home/spark/models/hf/X","num_speculative_tokens":6} '
    '--served-model-name two words --port 8000 ; flags= ; start_time=[Thu 2026-12-03 14:52:52 UTC] ; '
    'stop_time=[n/a] ; pid=5131 ; code=(null) ; status=0/0 }')
REAL_NOT_FOUND = "MemoryMax=infinity\nEnvironment=\nLoadState=not-found\nActiveState=inactive\n"
# The first probe: `-- /bin/sleep 60 '{"a": "b c"}' "x'y" 'tab<tab>x' 'back\slash' '$HOME' ''`
# (sleep refused the arguments: the unit failed, its ExecStart stays).
REAL_ODD_ARGS = (
    "{ path=/bin/sleep ; argv[]=/bin/sleep 60 {\"a\": \"b c\"} x'y tab\tx back\\slash $HOME  ; "
    "ignore_errors=no ; start_time=[Thu 2026-12-03 14:52:18 UTC] ; stop_time=[Thu 2026-12-03 14:52:18 UTC] ; "
    "pid=3794 ; code=exited ; status=1 }")
ODD_ARGV = ["/bin/sleep", "60", '{"a": "b c"}', "x'y", "tab\tx", "back\\slash", "$HOME", ""]


def test_parse_exec_argv_of_real_output():
    props = su.parse_show(REAL_TRANSIENT)
    # Unguided, an argument with a space splits: systemctl does not quote it.
    assert su.parse_exec_argv(props["ExecStart"]) == REAL_ARGV[:6] + ["two", "words", "--port", "8000"]
    assert su.parse_exec_argv(props["ExecStart"], like=REAL_ARGV) == REAL_ARGV
    # The JSON argument has no space (to_json with compact separators): exact without a hint.
    assert su.parse_exec_argv(props["ExecStart"])[4] == REAL_ARGV[4]
    ex = su.parse_show(REAL_EXEC_START_EX)["ExecStartEx"]
    assert su.parse_exec_argv(ex, like=REAL_ARGV) == REAL_ARGV
    assert su.parse_exec_argv(REAL_ODD_ARGS) == ["/bin/sleep", "60", '{"a":', '"b', 'c"}'] + ODD_ARGV[3:]
    assert su.parse_exec_argv(REAL_ODD_ARGS, like=ODD_ARGV) == ODD_ARGV  # tabs, quotes, $, an empty last argument


def test_parse_exec_argv_edges():
    assert su.parse_exec_argv("") == [] and su.parse_exec_argv(None) == []
    assert "ExecStart" not in su.parse_show(REAL_NOT_FOUND)
    # An argument holding " ; ": the last mark ends argv.
    text = "{ path=/bin/sh ; argv[]=/bin/sh -c a ; ignore_errors=no ; b ; ignore_errors=no ; start_time=[n/a] }"
    assert su.parse_exec_argv(text, like=["/bin/sh", "-c", "a ; ignore_errors=no ; b"]) == \
        ["/bin/sh", "-c", "a ; ignore_errors=no ; b"]
    # Short forms some tools print; plain words otherwise.
    assert su.parse_exec_argv("{ path=/bin/x ; argv[]=/bin/x -v ; }") == ["/bin/x", "-v"]
    assert su.parse_exec_argv("/bin/x  -v") == ["/bin/x", "-v"]
    # A hint that does not fit leaves the rest split on spaces.
    assert su.split_argv("a b c d", like=["a", "b c", "x"]) == ["a", "b c", "d"]
    assert su.split_argv("a b", like=["a", "b", "c"]) == ["a", "b"]
    assert su.split_argv("ab c", like=["a"]) == ["ab", "c"]


def test_parse_environment_of_real_output():
    assert su.parse_environment(su.parse_show(REAL_TRANSIENT)["Environment"]) == REAL_ENVIRONMENT
    assert su.parse_environment(REAL_UNIT_FILE_ENVIRONMENT.split("=", 1)[1]) == {
        "NCCL_IB_GID_INDEX": "3", "NOTE": "two words", "DOLLAR": "$$HOME", "RAY_ADDRESS": "192.168.100.10:6379",
        "JSON": '{"a": "b"}'}
    assert su.parse_environment('"A=\\101\\x42\\n"') == {"A": "AB\n"}  # octal, hex and C escapes


def test_size_bytes():
    assert su.size_bytes("98G") == 105226698752 == int(su.parse_show(REAL_TRANSIENT)["MemoryMax"])
    assert su.size_bytes("110G") == 118111600640 == int(su.parse_show(REAL_UNIT_FILE_SIZES)["MemoryMax"])
    assert su.size_bytes("100G") == int(su.parse_show(REAL_UNIT_FILE_SIZES)["MemoryHigh"])
    assert su.size_bytes("12G") == 12 * 1024 ** 3
    assert su.size_bytes("infinity") == "infinity" == su.size_bytes(" infinity ")
    assert su.size_bytes("0") == 0 and su.size_bytes(0) == 0 and su.size_bytes("105226698752") == 105226698752
    assert su.size_bytes("1K") == 1024 and su.size_bytes("512B") == 512 and su.size_bytes("2T") == 2 * 1024 ** 4
    assert su.size_bytes("1P") == 1024 ** 5 and su.size_bytes("1E") == 1024 ** 6 and su.size_bytes("3M") == 3 << 20
    assert su.size_bytes("1.5G") == 1610612736 and su.size_bytes("1G 512M") == 1610612736
    assert su.size_bytes("10.M") == 10 << 20
    for bad in ("", "80%", "-1", "1M 1G", "1G 1G", "1g", "G", "infinite", "1Gi", True, -1, "17E"):
        with pytest.raises(ValueError):
            su.size_bytes(bad)
    assert su.human_size("105226698752") == "98G" and su.human_size("infinity") == "infinity"
    assert su.human_size("1000") == "1000" and su.human_size("0") == "0" and su.human_size("80%") == "80%"


def transient_props():
    return su.parse_show(REAL_TRANSIENT)


WANT_PROPERTIES = {"MemoryMax": "98G", "MemorySwapMax": "0", "LimitMEMLOCK": "infinity"}


def test_drift_none_when_everything_matches():
    assert su.drift(transient_props(), command=REAL_ARGV, environment=REAL_ENVIRONMENT,
                    properties=WANT_PROPERTIES) == []
    # Values as YAML gives them (ints) and other spellings of the same size.
    assert su.drift(transient_props(), environment=dict(REAL_ENVIRONMENT, NCCL_IB_GID_INDEX=3),
                    properties={"MemoryMax": 105226698752, "MemorySwapMax": 0, "MemoryHigh": "infinity",
                                "LimitMEMLOCK": "infinity:infinity"}) == []
    assert su.drift(transient_props()) == []  # nothing asked, nothing compared


def test_drift_command():
    props = transient_props()
    changed = REAL_ARGV[:8] + ["8001"]
    assert su.drift(props, command=changed) == [
        {"what": "command", "name": "argv[8]", "want": "8001", "have": "8000"}]
    longer = REAL_ARGV + ["--enforce-eager"]
    assert su.drift(props, command=longer) == [
        {"what": "command", "name": "argv[9]", "want": "--enforce-eager", "have": ""},
        {"what": "command", "name": "argc", "want": "10", "have": "9"}]
    shorter = REAL_ARGV[:7]
    assert su.drift(props, command=shorter) == [
        {"what": "command", "name": "argv[7]", "want": "", "have": "--port"},
        {"what": "command", "name": "argc", "want": "7", "have": "9"}]
    # An inserted argument: the first position that differs, and the count.
    inserted = REAL_ARGV[:2] + ["--trust-remote-code"] + REAL_ARGV[2:]
    assert su.drift(props, command=inserted) == [
        {"what": "command", "name": "argv[2]", "want": "--trust-remote-code", "have": "/home/spark/models/hf/X"},
        {"what": "command", "name": "argc", "want": "10", "have": "9"}]
    other_json = list(REAL_ARGV)
    other_json[4] = '{"method":"dflash","model":"/home/spark/models/hf/X","num_speculative_tokens":8}'
    assert [d["name"] for d in su.drift(props, command=other_json)] == ["argv[4]"]


def test_drift_environment():
    props = transient_props()
    want = dict(REAL_ENVIRONMENT, NCCL_IB_GID_INDEX="7", NCCL_SOCKET_IFNAME="enp1s0f0np0")
    del want["TICK"]
    assert su.drift(props, environment=want) == [
        {"what": "environment", "name": "NCCL_IB_GID_INDEX", "want": "7", "have": "3"},
        {"what": "environment", "name": "NCCL_SOCKET_IFNAME", "want": "enp1s0f0np0", "have": ""},
        {"what": "environment", "name": "TICK", "want": "", "have": "a`b"}]


def test_drift_properties():
    props = transient_props()
    assert su.drift(props, properties={"MemoryMax": "110G", "MemorySwapMax": "1G", "LimitMEMLOCK": "64M",
                                       "MemoryHigh": "infinity"}) == [
        {"what": "property", "name": "MemoryMax", "want": "110G", "have": "105226698752"},
        {"what": "property", "name": "MemorySwapMax", "want": "1G", "have": "0"},
        {"what": "property", "name": "LimitMEMLOCK", "want": "64M", "have": "infinity"}]
    # A property systemctl did not print, booleans as systemd parses them, text.
    props.update(Delegate="yes", Nice="5", MemoryAccounting="yes")
    assert su.drift(props, properties={"Delegate": True, "Nice": 5, "CPUWeight": "100",
                                       "MemoryAccounting": True}) == [
        {"what": "property", "name": "CPUWeight", "want": "100", "have": ""}]
    assert su.drift(props, properties={"Delegate": "no", "MemoryMax": "80%"}) == [
        {"what": "property", "name": "Delegate", "want": "no", "have": "yes"},
        {"what": "property", "name": "MemoryMax", "want": "80%", "have": "105226698752"}]


def test_drift_of_a_unit_that_does_not_run_is_its_state_alone():
    expectations = dict(command=["/bin/other"], environment={"A": "1"}, properties={"MemoryMax": "1G"})
    failed = dict(transient_props(), ActiveState="failed")
    assert su.drift(failed, **expectations) == [
        {"what": "state", "name": "ActiveState", "want": "active", "have": "failed"}]
    assert su.drift(su.parse_show(REAL_NOT_FOUND), **expectations) == [
        {"what": "state", "name": "ActiveState", "want": "active", "have": "not-found"}]
    assert su.drift({}, **expectations) == [
        {"what": "state", "name": "ActiveState", "want": "active", "have": "unknown"}]
    assert su.drift(dict(transient_props(), ActiveState="activating"), command=REAL_ARGV) == []


def test_describe_names_each_difference():
    props = transient_props()
    env = su.parse_environment(props["Environment"])
    want_env = dict(REAL_ENVIRONMENT, NCCL_IB_GID_INDEX="7", NCCL_SOCKET_IFNAME="enp1s0f0np0")
    del want_env["TICK"]
    differences = (su.drift(props, command=REAL_ARGV[:7], environment=want_env,
                            properties={"MemoryMax": "110G"}))
    sentences = su.describe("laguna-vllm.service", differences, host="laguna-head", fix_hint="--tags vllm_serve",
                            environment=env, expected_environment=want_env)
    assert sentences == [
        'laguna-vllm.service on laguna-head: command argument argv[7] is "--port", the inventory wants none: '
        'rerun --tags vllm_serve.',
        'laguna-vllm.service on laguna-head: the command has 9 arguments, the inventory wants 7: '
        'rerun --tags vllm_serve.',
        'laguna-vllm.service on laguna-head: environment NCCL_IB_GID_INDEX is "3", the inventory wants "7": '
        'rerun --tags vllm_serve.',
        'laguna-vllm.service on laguna-head: environment NCCL_SOCKET_IFNAME is not set, the inventory wants '
        '"enp1s0f0np0": rerun --tags vllm_serve.',
        'laguna-vllm.service on laguna-head: environment TICK is "a`b", the inventory does not set it: '
        'rerun --tags vllm_serve.',
        'laguna-vllm.service on laguna-head: property MemoryMax is "105226698752" (98G), the inventory wants '
        '"110G": rerun --tags vllm_serve.']
    longer = su.drift(props, command=REAL_ARGV + ["--enforce-eager"])
    assert su.describe("u.service", longer)[0] == \
        'u.service: command argument argv[9] is missing, the inventory wants "--enforce-eager".'
    changed = su.drift(props, command=REAL_ARGV[:8] + ["8001"])
    assert su.describe("u.service", changed, fix_hint="--tags vllm_serve") == [
        'u.service: command argument argv[8] is "8000", the inventory wants "8001": rerun --tags vllm_serve.']
    down = su.drift(dict(props, ActiveState="failed"), command=REAL_ARGV)
    assert su.describe("u.service", down, host="h") == ['u.service on h: is failed, the inventory wants it active.']


def plant(systemd, unit, **props):
    """Give a unit of the fake systemd properties that only the real one reports (ExecStart, sizes)."""
    state = systemd.read()
    state["units"][unit].update(props)
    with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as handle:
        json.dump(state, handle)


def exec_start(argv, pid):
    """ExecStart= as systemctl 252 prints it (see REAL_TRANSIENT)."""
    return ("{ path=%s ; argv[]=%s ; ignore_errors=no ; start_time=[Thu 2026-12-03 14:52:52 UTC] ; "
            "stop_time=[n/a] ; pid=%s ; code=(null) ; status=0/0 }" % (argv[0], " ".join(argv), pid))


def run_planted(systemd, run_module):
    started = run_module(systemd_run_service, SERVICE)
    plant(systemd, "laguna-ray-head.service", ExecStart=exec_start(SERVICE["command"], started["main_pid"]),
          MemoryMax="118111600640", LimitMEMLOCK="infinity")
    return started


EXPECT = {"name": "laguna-ray-head", "expect_command": SERVICE["command"],
          "expect_environment": SERVICE["environment"], "expect_properties": SERVICE["properties"],
          "host": "laguna-head", "fix_hint": "--tags ray_cluster,vllm_serve"}


def test_module_reports_a_unit_that_matches(systemd, run_module):
    run_planted(systemd, run_module)
    result = run_module(systemd_user_unit, EXPECT, check_mode=True)
    assert not result.failed and not result["changed"]
    assert result["matches"] and result["differences"] == [] and result["problems"] == []
    assert result["command"] == SERVICE["command"]
    show = systemd.calls("systemctl")[-1]
    assert show[:4] == ["systemctl", "--user", "show", "laguna-ray-head.service"]
    assert show[4] == "--property=" + ",".join(su.DEFAULT_PROPERTIES + ("ExecStart", "MemoryMax"))
    assert not [c for c in systemd.calls("systemctl") if c[2] in ("start", "stop", "restart")]


def test_module_reports_each_difference(systemd, run_module):
    run_planted(systemd, run_module)
    args = dict(EXPECT, expect_command=SERVICE["command"][:3] + ["--block"] + ["--num-gpus=1"],
                expect_environment=dict(SERVICE["environment"], NCCL_IB_GID_INDEX="7"),
                expect_properties={"MemoryMax": "98G", "LimitMEMLOCK": "infinity"})
    result = run_module(systemd_user_unit, args)
    assert not result["changed"] and not result["matches"]
    assert result["differences"] == [
        {"what": "command", "name": "argv[4]", "want": "--num-gpus=1", "have": "", "unit": "laguna-ray-head.service"},
        {"what": "command", "name": "argc", "want": "5", "have": "4", "unit": "laguna-ray-head.service"},
        {"what": "environment", "name": "NCCL_IB_GID_INDEX", "want": "7", "have": "3",
         "unit": "laguna-ray-head.service"},
        {"what": "property", "name": "MemoryMax", "want": "98G", "have": "118111600640",
         "unit": "laguna-ray-head.service"}]
    assert result["problems"][2] == (
        'laguna-ray-head.service on laguna-head: environment NCCL_IB_GID_INDEX is "3", the inventory wants "7": '
        'rerun --tags ray_cluster,vllm_serve.')
    assert result["problems"][3] == (
        'laguna-ray-head.service on laguna-head: property MemoryMax is "118111600640" (110G), the inventory wants '
        '"98G": rerun --tags ray_cluster,vllm_serve.')
    assert len(result["problems"]) == 4


def test_module_gives_one_state_difference_for_a_unit_that_does_not_run(systemd, run_module):
    result = run_module(systemd_user_unit, dict(EXPECT, expect_properties={"MemoryMax": "98G"}))
    assert not result["matches"] and not result["running"] and result["command"] == []
    assert result["differences"] == [{"what": "state", "name": "ActiveState", "want": "active",
                                      "have": "not-found", "unit": "laguna-ray-head.service"}]
    assert result["problems"] == [
        "laguna-ray-head.service on laguna-head: is not-found, the inventory wants it active: "
        "rerun --tags ray_cluster,vllm_serve."]


def test_module_without_a_user_manager_compares_nothing_but_the_state(systemd, run_module, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMD_NO_MANAGER", "1")
    result = run_module(systemd_user_unit, EXPECT, check_mode=True)
    assert not result.failed and not result["user_manager"] and not result["matches"]
    assert [d["have"] for d in result["differences"]] == ["unknown"]


def test_module_without_expectations_returns_no_comparison(systemd, run_module):
    run_planted(systemd, run_module)
    result = run_module(systemd_user_unit, {"name": "laguna-ray-head"})
    assert "differences" not in result and "matches" not in result and "problems" not in result
    assert "ExecStart" not in systemd.calls("systemctl")[-1][4]


def test_module_compares_after_a_state_change(systemd, run_module):
    run_planted(systemd, run_module)
    result = run_module(systemd_user_unit, dict(EXPECT, state="stopped"))
    assert result["changed"] and result["differences"][0]["what"] == "state" and len(result["differences"]) == 1


def test_values_from_an_environment_file_are_read_from_the_running_process(systemd, run_module):
    # A persistent raylet gets NCCL_IB_GID_INDEX from the file its start
    # script wrote, not from Environment=: the process's value counts.
    run_planted(systemd, run_module)
    env = {k: v for k, v in SERVICE["environment"].items() if k != "NCCL_IB_GID_INDEX"}
    proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, NCCL_IB_GID_INDEX="5"))
    try:
        plant(systemd, "laguna-ray-head.service", MainPID=str(proc.pid),
              Environment=" ".join('"%s=%s"' % item for item in sorted(env.items())))
        args = dict(EXPECT, expect_environment=dict(env, NCCL_IB_GID_INDEX="5"),
                    process_environment_keys=["NCCL_IB_GID_INDEX"])
        assert run_module(systemd_user_unit, args)["matches"]
        stale = run_module(systemd_user_unit, dict(args, expect_environment=dict(env, NCCL_IB_GID_INDEX="7")))
        assert [d["name"] for d in stale["differences"]] == ["NCCL_IB_GID_INDEX"]
        assert 'NCCL_IB_GID_INDEX is "5", the inventory wants "7"' in stale["problems"][0]
        blind = run_module(systemd_user_unit, dict(args, process_environment_keys=[]))
        assert 'NCCL_IB_GID_INDEX is not set' in blind["problems"][0]
    finally:
        proc.kill()
        proc.wait()


def test_time_settings_compare_as_systemd_shows_them():
    # TimeoutStopSec=20 shows as TimeoutStopUSec=20s.
    assert su.show_name("TimeoutStopSec") == "TimeoutStopUSec" and su.show_name("KillMode") == "KillMode"
    assert su.same_property("TimeoutStopSec", "20", "20s")
    assert su.same_property("TimeoutStopSec", "90", "1min 30s")
    assert su.same_property("TimeoutStopSec", "100ms", "100ms")
    assert not su.same_property("TimeoutStopSec", "20", "1min 30s")
    assert not su.same_property("TimeoutStopSec", "20", "")
    assert su.timespan_usec("infinity") == "infinity"
    props = {"TimeoutStopUSec": "1min 30s", "KillMode": "mixed"}
    drift = su.properties_drift({"TimeoutStopSec": "20", "KillMode": "mixed"}, props)
    assert drift == [{"what": "property", "name": "TimeoutStopSec", "want": "20", "have": "1min 30s"}]
