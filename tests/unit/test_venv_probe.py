"""venv_probe / module_utils.venv_probe: the venv role's one read."""
import os
import re
import subprocess
import sys
import time

from helpers.fake_bin import on_path
from ansible_collections.laguna.spark.plugins.module_utils import procs, venv_probe
from ansible_collections.laguna.spark.plugins.modules import venv_pins_info
from ansible_collections.laguna.spark.plugins.modules import venv_probe as venv_probe_module

PINS = ["pip", "vllm==0.25.1"]


def test_dpkg_query_argv_is_the_role_s_test():
    assert venv_probe.dpkg_query_argv("dpkg-query", "python3-venv") == [
        "dpkg-query", "-W", "-f", "${db:Status-Status}", "python3-venv"]


def test_a_package_is_there_only_when_dpkg_says_installed():
    statuses = {"a": "installed", "b": "config-files", "c": "", "d": "not-installed", "e": "installed\n"}
    assert venv_probe.packages_missing(statuses) == ["b", "c", "d"]


def test_executables_missing_counts_a_dangling_link_as_there(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "vllm").write_text("")
    os.symlink("/nonexistent", str(tmp_path / "bin" / "ray"))
    assert venv_probe.executables_missing(str(tmp_path), ["vllm", "ray", "hf"]) == ["hf"]


def test_nvcc_result_in_the_command_module_s_words():
    assert venv_probe.nvcc_result(0, "release 13.0\n", "") == {"rc": 0, "stdout": "release 13.0", "stderr": "",
                                                               "msg": ""}
    failed = venv_probe.nvcc_result(2, "", "boom\nno GPU\n")
    assert failed["rc"] == 2 and failed["msg"] == "non-zero return code 2: no GPU"
    assert venv_probe.nvcc_result(None, "", "", "/v/bin:/c/bin") == {
        "rc": 127, "stdout": "", "stderr": "", "msg": "no nvcc on PATH /v/bin:/c/bin"}


def _result(**changes):
    result = {"system_packages_missing": [], "exists": True, "strays": [], "missing": [],
              "executables_missing": [], "nvcc": {"rc": 0, "msg": ""}}
    result.update(changes)
    return result


def test_no_difference_on_a_venv_as_wanted():
    assert venv_probe.differences(_result(), "/v") == []
    assert venv_probe.differences(_result(nvcc={}), "/v") == []


def test_one_line_per_difference():
    lines = venv_probe.differences(_result(
        system_packages_missing=["python3-venv"], exists=False,
        strays=[{"pid": 42, "cmdline": "/v/bin/python -m pip install vllm==0.25.1"}],
        missing=[{"pin": "vllm==0.25.1", "installed": None}], executables_missing=["vllm", "ray"],
        nvcc={"rc": 127, "msg": "no nvcc on PATH /x"}), "/v")
    assert lines == ["system packages to install: python3-venv", "venv to create: /v",
                     "pip install left running, to stop: pid 42 (/v/bin/python -m pip install vllm==0.25.1)",
                     "pins to install: vllm==0.25.1 (installed: None)", "missing in /v/bin: vllm, ray",
                     "nvcc does not run on the raylets' PATH (no nvcc on PATH /x)"]


def _args(venv, cuda, **changes):
    args = {"venv": str(venv), "pins": PINS, "system_packages": [], "executables": ["pip"],
            "stray_pattern": "^" + re.escape(str(venv) + "/bin/python -m pip install "),
            "nvcc_path": "%s/bin:%s:/nonexistent" % (venv, cuda)}
    args.update(changes)
    return args


def test_probe_on_a_real_venv_reads_what_the_role_checked(tmp_path, run_module):
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "nvcc").write_text("#!/bin/sh\necho \"release 13.0 $PATH\"\n")
    (cuda / "nvcc").chmod(0o755)
    args = _args(venv, cuda, executables=["pip", "vllm"])
    result = run_module(venv_probe_module, args, check_mode=True)
    # The pins: exactly what venv_pins_info returns.
    pins = run_module(venv_pins_info, {"venv": str(venv), "pins": PINS})
    for key in ("exists", "installed", "missing", "install_argv"):
        assert result[key] == pins[key], key
    assert [m["pin"] for m in result["missing"]] == ["vllm==0.25.1"]
    assert result["executables_missing"] == ["vllm"] and result["strays"] == []
    # nvcc ran with the raylets' PATH, found on it.
    assert result["nvcc"]["rc"] == 0 and result["nvcc"]["stdout"] == "release 13.0 " + args["nvcc_path"]
    assert result["differences"] == ["pins to install: vllm==0.25.1 (installed: None)",
                                     "missing in %s/bin: vllm" % venv]
    assert not result["changed"]


def test_probe_without_a_venv_nvcc_or_dpkg(tmp_path, run_module, monkeypatch):
    on_path(monkeypatch, tmp_path / "bin", {"dpkg-query": "#!/bin/sh\n[ \"$4\" = there ] && printf installed\n"
                                                          "exit 1\n"})
    result = run_module(venv_probe_module, _args(tmp_path / "none", tmp_path / "no-cuda",
                                                 system_packages=["there", "gone"]))
    assert result["system_packages"] == {"there": "installed", "gone": ""}
    assert result["system_packages_missing"] == ["gone"]
    assert not result["exists"] and [m["pin"] for m in result["missing"]] == PINS
    assert result["nvcc"]["rc"] == 127 and result["executables_missing"] == ["pip"]
    assert result["differences"][:2] == ["system packages to install: gone", "venv to create: %s" % (tmp_path / "none")]
    # Nothing asked, nothing run.
    result = run_module(venv_probe_module, _args(tmp_path / "none", tmp_path, nvcc_path=None, executables=[]))
    assert result["nvcc"] == {} and result["system_packages"] == {}


def test_probe_finds_a_pip_install_left_running_and_leaves_it(tmp_path, run_module):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, str(venv / "bin" / "python"))
    fake = tmp_path / "fake" / "pip"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    # Its command line reads "<venv>/bin/python -m pip install x", as the role's install's does.
    child = subprocess.Popen([str(venv / "bin" / "python"), "-m", "pip", "install", "x"],
                             env=dict(os.environ, PYTHONPATH=str(tmp_path / "fake")))
    try:
        expected = "%s/bin/python -m pip install x" % venv
        deadline = time.monotonic() + 30
        while procs.cmdline(child.pid) != expected and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert procs.cmdline(child.pid) == expected, (child.poll(), procs.cmdline(child.pid))
        pattern = "^" + re.escape(str(venv) + "/bin/python -m pip install ")
        result = run_module(venv_probe_module, _args(venv, tmp_path, pins=[], nvcc_path=None, executables=[],
                                                     stray_pattern=pattern), check_mode=True)
        assert [s["pid"] for s in result["strays"]] == [child.pid], (result["strays"], procs.matching(pattern))
        assert result["differences"][0].startswith("pip install left running, to stop: pid %d" % child.pid)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
