import json
import os
import subprocess

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import systemd_run as sr
from ansible_collections.laguna.spark.plugins.modules import systemd_run_service
from helpers.fake_bin import on_path


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


def _frozen(monkeypatch, unit, pids):
    """procs.stopped (tested on a fake /proc in test_procs.py) says ``unit``'s processes ``pids`` are stopped."""
    from ansible_collections.laguna.spark.plugins.module_utils import procs  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(procs, "stopped", lambda name, proc="/proc", uid=None: list(pids) if name == unit else [])


def test_a_running_unit_whose_processes_a_signal_stopped_is_restarted(systemd, run_module, monkeypatch):
    """A frozen raylet (SIGSTOP): active to systemd, the same settings, but no
    work done; Ray drops the node. The run restarts it, in check mode too (as
    what it would do)."""
    run_module(systemd_run_service, ARGS)
    _frozen(monkeypatch, "laguna-ray-head.service", [4242, 4243])
    dry = run_module(systemd_run_service, ARGS, check_mode=True)
    assert dry["changed"] and dry["action"] == "restarted" and dry["stopped_pids"] == [4242, 4243]
    assert len(systemd.calls("systemd-run")) == 1
    result = run_module(systemd_run_service, ARGS)
    assert result["changed"] and result["action"] == "restarted" and result["stopped_pids"] == [4242, 4243]
    assert ["systemctl", "--user", "stop", "laguna-ray-head.service"] in systemd.read()["calls"]
    assert len(systemd.calls("systemd-run")) == 2
    _frozen(monkeypatch, "laguna-ray-head.service", [])
    again = run_module(systemd_run_service, ARGS)
    assert not again["changed"] and again["stopped_pids"] == []


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
    on_path(monkeypatch, tmp_path / "broken", {
        "systemctl": "#!/bin/sh\necho 'Failed to connect to bus: No such file or directory' >&2\nexit 1\n"})
    result = run_module(systemd_run_service, ARGS, check_mode=True)
    assert result["changed"] and result["action"] == "started"
    assert "no user manager" in str(result.get("warnings"))
    assert run_module(systemd_run_service, ARGS).failed


# --- persistent units ---------------------------------------------------------

def _persistent(tmp_path, monkeypatch, **extra):
    units = tmp_path / "units"
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    monkeypatch.setenv("HOME", str(tmp_path))
    return dict(ARGS, persistent=True, unit_dir=str(units), runtime_dir=str(tmp_path / "run"), **extra)


def test_a_persistent_unit_is_written_enabled_and_started(systemd, run_module, tmp_path, monkeypatch):
    args = _persistent(tmp_path, monkeypatch, after=["laguna-ray-head.service"])
    result = run_module(systemd_run_service, args)
    assert result["changed"] and result["action"] == "started" and result["persistent"]
    text = (tmp_path / "units" / "laguna-ray-head.service").read_text()
    assert "Restart=always" in text and "WantedBy=default.target" in text
    assert "After=laguna-ray-head.service" in text and "MemorySwapMax=0" in text
    assert 'Environment="NCCL_IB_GID_INDEX=3"' in text
    assert "[cfg %s]" % result["fingerprint"] in text
    calls = [c[2:] for c in systemd.calls("systemctl")]
    assert ["daemon-reload"] in calls and ["enable", "laguna-ray-head.service"] in calls
    assert ["start", "laguna-ray-head.service"] in calls and systemd.calls("systemd-run") == []
    unit = systemd.read()["units"]["laguna-ray-head.service"]
    assert unit["UnitFileState"] == "enabled" and unit["ActiveState"] == "active"


def test_a_persistent_unit_with_the_same_settings_is_left_alone(systemd, run_module, tmp_path, monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    calls = len(systemd.read()["calls"])
    again = run_module(systemd_run_service, args)
    assert not again["changed"] and again["action"] == "none" and again["persistent"]
    assert [c[2] for c in systemd.read()["calls"][calls:]] == ["show"]


def test_a_changed_persistent_unit_is_rewritten_and_restarted_with_a_diff(systemd, run_module, tmp_path, monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    changed = dict(args, properties=dict(args["properties"], MemoryMax="98G"))
    preview = run_module(systemd_run_service, changed, check_mode=True, diff=True)
    assert preview["changed"] and preview["action"] == "restarted"
    assert "MemoryMax=110G" in preview["diff"]["before"] and "MemoryMax=98G" in preview["diff"]["after"]
    assert "MemoryMax=110G" in (tmp_path / "units" / "laguna-ray-head.service").read_text()
    result = run_module(systemd_run_service, changed)
    assert result["action"] == "restarted"
    assert "MemoryMax=98G" in (tmp_path / "units" / "laguna-ray-head.service").read_text()
    assert ["restart", "laguna-ray-head.service"] in [c[2:] for c in systemd.calls("systemctl")]


def test_a_persistent_unit_whose_processes_a_signal_stopped_is_restarted(systemd, run_module, tmp_path,
                                                                         monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    _frozen(monkeypatch, "laguna-ray-head.service", [4242])
    calls = len(systemd.read()["calls"])
    result = run_module(systemd_run_service, args)
    assert result["changed"] and result["action"] == "restarted" and result["stopped_pids"] == [4242]
    assert ["restart", "laguna-ray-head.service"] in [c[2:] for c in systemd.read()["calls"][calls:]]


def test_switching_between_transient_and_persistent_stops_the_old_unit(systemd, run_module, tmp_path, monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, dict(args, persistent=False))
    assert systemd.read()["units"]["laguna-ray-head.service"].get("FragmentPath") is None
    result = run_module(systemd_run_service, args)
    assert result["action"] == "restarted" and result["persistent"]
    calls = [c[2:] for c in systemd.calls("systemctl")]
    assert calls.index(["stop", "laguna-ray-head.service"]) < calls.index(["daemon-reload"])
    back = run_module(systemd_run_service, dict(args, persistent=False))
    assert back["action"] == "restarted" and not back["persistent"]
    assert not (tmp_path / "units" / "laguna-ray-head.service").exists()
    assert ["disable", "laguna-ray-head.service"] in [c[2:] for c in systemd.calls("systemctl")]
    assert len(systemd.calls("systemd-run")) == 2


def test_a_start_env_script_is_written_and_run_before_each_start(systemd, run_module, tmp_path, monkeypatch):
    script = "#!/bin/sh\necho NCCL_IB_GID_INDEX=5 > \"$1\"\n"
    args = _persistent(tmp_path, monkeypatch, start_env_script=script)
    run_module(systemd_run_service, args)
    written = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.start-env"
    assert written.read_text() == script and os.access(str(written), os.X_OK)
    text = (tmp_path / "units" / "laguna-ray-head.service").read_text()
    env_file = str(tmp_path / "run" / "laguna-spark" / "laguna-ray-head.env")
    assert "ExecStartPre=%s %s" % (written, env_file) in text
    assert "EnvironmentFile=-%s" % env_file in text
    transient = run_module(systemd_run_service, dict(args, persistent=False))
    assert transient["action"] == "restarted" and not written.exists()


def test_stopping_a_persistent_unit_keeps_it_enabled_and_teardown_removes_it(systemd, run_module, tmp_path,
                                                                             monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    stop = {k: args[k] for k in ("name", "unit_dir", "runtime_dir")}
    paused = run_module(systemd_run_service, dict(stop, state="stopped", persistent=True))
    assert paused["action"] == "stopped" and (tmp_path / "units" / "laguna-ray-head.service").exists()
    removed = run_module(systemd_run_service, dict(stop, state="stopped"))
    assert removed["changed"] and not (tmp_path / "units" / "laguna-ray-head.service").exists()
    assert not run_module(systemd_run_service, dict(stop, state="stopped"))["changed"]


def test_bounds_are_checked(systemd, run_module, tmp_path, monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    assert "restart_sec must be between 1 and 3600" in run_module(systemd_run_service, dict(args, restart_sec=0))["msg"]
    assert ("start_limit_interval must be between 1 and 86400"
            in run_module(systemd_run_service, dict(args, start_limit_interval=0))["msg"])
    assert "value of restart must be one of" in run_module(systemd_run_service, dict(args, restart="no"))["msg"]


def _sections(text):
    """{section: [lines]} of a unit file."""
    found, current = {}, None
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = found.setdefault(line[1:-1], [])
        elif line and current is not None:
            current.append(line)
    return found


def test_a_persistent_unit_restarts_on_any_exit_but_a_stop_within_a_start_limit(
        systemd, run_module, tmp_path, monkeypatch):
    # vLLM 0.25.1 exits with status 0 when one of its Ray workers dies:
    # Restart=on-failure would leave it down. A crash loop ends failed at
    # the start limit, which systemd reads in [Unit].
    args = _persistent(tmp_path, monkeypatch, start_limit_interval=3600, start_limit_burst=5, restart_sec=15)
    first = run_module(systemd_run_service, args)
    sections = _sections((tmp_path / "units" / "laguna-ray-head.service").read_text())
    assert "StartLimitIntervalSec=3600" in sections["Unit"] and "StartLimitBurst=5" in sections["Unit"]
    assert "Restart=always" in sections["Service"] and "RestartSec=15" in sections["Service"]
    assert not any(line.startswith(("Restart", "StartLimit")) for line in sections["Install"])
    # Another policy or limit is another unit file: rewritten and restarted.
    on_failure = run_module(systemd_run_service, dict(args, restart="on-failure"))
    assert on_failure["action"] == "restarted" and on_failure["fingerprint"] != first["fingerprint"]
    assert "Restart=on-failure" in (tmp_path / "units" / "laguna-ray-head.service").read_text()
    wider = run_module(systemd_run_service, dict(args, restart="on-failure", start_limit_interval=7200))
    assert wider["action"] == "restarted"
    assert "StartLimitIntervalSec=7200" in (tmp_path / "units" / "laguna-ray-head.service").read_text()


def test_a_start_the_run_makes_resets_the_start_limit_first(systemd, run_module, tmp_path, monkeypatch):
    # A start or restart the module makes is not one of systemd's automatic
    # restarts: reset-failed clears the start-limit counter before each, so
    # the limit bounds only what systemd does by itself (the benchmark's
    # sweep restarts vLLM more often than vllm_serve_start_limit_burst).
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    run_module(systemd_run_service, dict(args, state="restarted"))
    calls = [c[2:] for c in systemd.calls("systemctl")]
    unit = "laguna-ray-head.service"
    for verb in ("start", "restart"):
        at = calls.index([verb, unit])
        assert calls[at - 1] == ["reset-failed", unit], calls
    left_alone = len(systemd.read()["calls"])
    run_module(systemd_run_service, args)
    assert [c[2] for c in systemd.read()["calls"][left_alone:]] == ["show"]


def test_unit_file_refuses_an_unknown_restart_policy():
    with pytest.raises(ValueError, match="Restart=no"):
        sr.unit_file("d", ["x"], restart="no")


def _systemd_words(line):
    """Split an ExecStart= value as systemd does (systemd.service "Command
    lines": whitespace-separated words, double-quoted words with C escapes,
    %% and $$ for a literal % and $)."""
    words, i = [], 0
    line = line.replace("%%", "\0pct").replace("$$", "\0dollar")
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        if line[i] == '"':
            i, word = i + 1, ""
            while line[i] != '"':
                if line[i] == "\\":
                    i += 1
                word += line[i]
                i += 1
            i += 1
            assert i == len(line) or line[i] == " ", "a closing quote must be followed by whitespace"
        else:
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            word, i = line[i:end], end
            assert "%" not in word and "$" not in word.replace("\0dollar", ""), word
        words.append(word.replace("\0pct", "%").replace("\0dollar", "$"))
    return words


def test_a_unit_files_command_line_reads_back_as_the_argv():
    argv = ["/home/spark/venvs/vllm-025/bin/vllm", "serve", "/home/spark/models/hf/Laguna-S-2.1-FP8",
            "--speculative-config", '{"method":"dflash","model":"/m/x","num_speculative_tokens":6}',
            "a b", "100%", "$HOME", "back\\slash", 'it\'s', ";", ""]
    text = sr.unit_file("d", argv, {"A": "1 2", "B": 'say "hi" 50%'}, {"MemoryMax": "98G"})
    line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
    assert _systemd_words(line[len("ExecStart="):]) == argv
    envs = [l[len("Environment="):] for l in text.splitlines() if l.startswith("Environment=")]
    assert [_systemd_words(e)[0] for e in envs] == ["A=1 2", 'B=say "hi" 50%']
    with pytest.raises(ValueError):
        sr.unit_file("d", ["a\nb"])


def test_arguments_and_environment_reach_systemd_run_unexpanded(systemd, run_module):
    args = dict(ARGS, command=["/venv/bin/ray", "start", "~/x", "$HOME"], environment={"DOLLAR": "$HOME"})
    run_module(systemd_run_service, args)
    argv = systemd.calls("systemd-run")[0]
    assert "--setenv=DOLLAR=$HOME" in argv and argv[-2:] == ["~/x", "$HOME"]


def test_a_resolved_value_stays_out_of_the_file_and_a_stale_one_restarts(systemd, run_module, tmp_path,
                                                                         monkeypatch):
    script = "#!/bin/sh\necho NCCL_IB_GID_INDEX=5 > \"$1\"\n"
    args = _persistent(tmp_path, monkeypatch, start_env_script=script, start_env_keys=["NCCL_IB_GID_INDEX"],
                       environment={"NCCL_IB_GID_INDEX": "5", "VLLM_HOST_IP": "192.168.100.10"})
    first = run_module(systemd_run_service, args)
    text = (tmp_path / "units" / "laguna-ray-head.service").read_text()
    assert "NCCL_IB_GID_INDEX" not in text and "VLLM_HOST_IP=192.168.100.10" in text
    # The unit's main process, as the start script left it: index 5.
    proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, NCCL_IB_GID_INDEX="5"))
    try:
        state = systemd.read()
        state["units"]["laguna-ray-head.service"]["MainPID"] = str(proc.pid)
        with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as handle:
            json.dump(state, handle)
        same = run_module(systemd_run_service, args)
        assert not same["changed"] and same["start_env_drift"] == {}
        # After a reboot the script resolved 7, and so does the play: the file is the same, nothing restarts.
        moved = dict(args, environment=dict(args["environment"], NCCL_IB_GID_INDEX="7"))
        proc.kill()
        proc.wait()
        proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, NCCL_IB_GID_INDEX="7"))
        state = systemd.read()
        state["units"]["laguna-ray-head.service"]["MainPID"] = str(proc.pid)
        with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as handle:
            json.dump(state, handle)
        after_reboot = run_module(systemd_run_service, moved)
        assert not after_reboot["changed"] and after_reboot["fingerprint"] == first["fingerprint"]
        # The index moved while it ran (the process still has 7, the node now 3): restarted.
        stale = run_module(systemd_run_service, dict(args, environment=dict(args["environment"],
                                                                            NCCL_IB_GID_INDEX="3")))
        assert stale["changed"] and stale["action"] == "restarted"
        assert stale["start_env_drift"] == {"NCCL_IB_GID_INDEX": {"have": "7", "want": "3"}}
    finally:
        proc.kill()
        proc.wait()


def test_a_persistent_unit_waiting_to_be_restarted_is_stopped_and_removed(systemd, run_module, tmp_path,
                                                                          monkeypatch):
    args = _persistent(tmp_path, monkeypatch)
    run_module(systemd_run_service, args)
    state = systemd.read()
    state["units"]["laguna-ray-head.service"].update(ActiveState="activating", SubState="auto-restart", MainPID="0")
    with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as handle:
        json.dump(state, handle)
    stop = {k: args[k] for k in ("name", "unit_dir", "runtime_dir")}
    result = run_module(systemd_run_service, dict(stop, state="stopped"))
    assert result["changed"] and result["action"] == "stopped"
    assert ["stop", "laguna-ray-head.service"] in [c[2:] for c in systemd.calls("systemctl")]
    assert not (tmp_path / "units" / "laguna-ray-head.service").exists()


# --- secret environment ---------------------------------------------------------

SECRET = "sk-0123456789abcdef"


def _secret_args(tmp_path, monkeypatch, value=SECRET, **extra):
    monkeypatch.setenv("HOME", str(tmp_path))
    return dict(ARGS, runtime_dir=str(tmp_path / "run"), secret_environment={"VLLM_API_KEY": value}, **extra)


def test_secrets_go_to_a_private_file_never_to_the_command_line_or_the_result(systemd, run_module, tmp_path,
                                                                              monkeypatch):
    result = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch))
    assert result["changed"] and result["action"] == "started"
    path = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    text = path.read_text()
    assert "VLLM_API_KEY=%s\n" % SECRET in text and sr.salt_of(text)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    argv = systemd.calls("systemd-run")[0]
    assert "--property=EnvironmentFile=%s" % path in argv
    assert SECRET not in json.dumps(systemd.read()) and SECRET not in json.dumps(result)
    # The fingerprint covers the secret by a keyed digest only.
    assert result["fingerprint"] != sr.fingerprint(ARGS["command"], {k: str(v) for k, v in ARGS["environment"].items()},
                                                   {k: str(v) for k, v in ARGS["properties"].items()})


def test_the_same_secret_leaves_the_service_alone_a_new_one_restarts_it(systemd, run_module, tmp_path, monkeypatch):
    first = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch))
    again = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch))
    assert not again["changed"] and again["fingerprint"] == first["fingerprint"]
    rotated = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch, value="sk-rotated-key"))
    assert rotated["changed"] and rotated["action"] == "restarted"
    assert rotated["fingerprint"] != first["fingerprint"]
    path = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    assert "VLLM_API_KEY=sk-rotated-key\n" in path.read_text()
    # Dropping the secret restarts without the file, and removes it.
    plain = run_module(systemd_run_service, dict(ARGS, runtime_dir=str(tmp_path / "run")))
    assert plain["changed"] and not path.exists()
    assert "--property=EnvironmentFile=%s" % path not in systemd.calls("systemd-run")[-1]


def test_secret_check_mode_writes_nothing(systemd, run_module, tmp_path, monkeypatch):
    result = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch), check_mode=True)
    assert result["changed"] and not (tmp_path / ".config" / "laguna-spark").exists()
    assert SECRET not in json.dumps(result)


def test_a_secret_that_a_file_cannot_carry_is_refused_without_showing_it(systemd, run_module, tmp_path, monkeypatch):
    result = run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch, value='has "quote"'))
    assert result.failed and "VLLM_API_KEY" in result["msg"] and "quote\"" not in json.dumps(result)


def test_stopping_removes_the_secret_file(systemd, run_module, tmp_path, monkeypatch):
    run_module(systemd_run_service, _secret_args(tmp_path, monkeypatch))
    path = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    assert path.exists()
    result = run_module(systemd_run_service, {"name": "laguna-ray-head", "state": "stopped",
                                              "runtime_dir": str(tmp_path / "run")})
    assert result["changed"] and not path.exists()


def test_a_secret_read_from_a_file_on_the_node_is_a_secret_like_the_others(
        systemd, run_module, tmp_path, monkeypatch):
    # The Ray token for vLLM's driver: read from the head's token file by the
    # module, so the controller never holds it; the same file as a value given inline.
    token = tmp_path / "ray-token"
    token.write_text("cd" * 32 + "\n")
    args = dict(_secret_args(tmp_path, monkeypatch), secret_environment_files={"RAY_AUTH_TOKEN": str(token)})
    result = run_module(systemd_run_service, args)
    path = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    text = path.read_text()
    assert result["changed"] and "RAY_AUTH_TOKEN=%s\n" % ("cd" * 32) in text and "VLLM_API_KEY=%s\n" % SECRET in text
    assert "cd" * 32 not in json.dumps(result) and "cd" * 32 not in json.dumps(systemd.read())
    both = {"VLLM_API_KEY": SECRET, "RAY_AUTH_TOKEN": "cd" * 32}
    inline = dict(_secret_args(tmp_path, monkeypatch), secret_environment=both)
    assert not run_module(systemd_run_service, inline)["changed"]
    assert not run_module(systemd_run_service, args)["changed"]
    # A rotated token (the file rewritten) restarts the service.
    token.write_text("ef" * 32)
    rotated = run_module(systemd_run_service, args)
    assert rotated["changed"] and rotated["action"] == "restarted" and "RAY_AUTH_TOKEN=%s\n" % ("ef" * 32) in path.read_text()


def test_a_missing_secret_file_fails_naming_it_except_in_check_mode(systemd, run_module, tmp_path, monkeypatch):
    missing = str(tmp_path / "no-token")
    args = dict(_secret_args(tmp_path, monkeypatch), secret_environment_files={"RAY_AUTH_TOKEN": missing})
    predicted = run_module(systemd_run_service, args, check_mode=True)
    assert not predicted.failed and predicted["changed"] and predicted["action"] == "started"
    result = run_module(systemd_run_service, args)
    assert result.failed and not systemd.calls("systemd-run")
    assert ("RAY_AUTH_TOKEN of laguna-ray-head.service comes from %s, which is missing or empty on this node: run the "
            "role that writes it first (for the Ray token: --tags ray_cluster)" % missing) == result["msg"]


def test_a_persistent_unit_reads_its_secrets_from_the_private_file(systemd, run_module, tmp_path, monkeypatch):
    args = dict(_persistent(tmp_path, monkeypatch), secret_environment={"RAY_AUTH_TOKEN": "ab" * 32})
    result = run_module(systemd_run_service, args)
    assert result["changed"]
    text = (tmp_path / "units" / "laguna-ray-head.service").read_text()
    path = tmp_path / ".config" / "laguna-spark" / "laguna-ray-head.secret-env"
    assert "EnvironmentFile=%s" % path in text and "ab" * 32 not in text
    assert not run_module(systemd_run_service, args)["changed"]
