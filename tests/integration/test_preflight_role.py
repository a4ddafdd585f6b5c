"""The preflight role on localhost: driver, venv, disk, RoCE link and the stray vllm serve kill."""
import os
import subprocess
import time

import pytest

from helpers import DOUBLES, role_events


@pytest.fixture
def node(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for exe in ("vllm", "ray", "hf"):
        (venv / "bin" / exe).write_text("#!/bin/sh\n")
        (venv / "bin" / exe).chmod(0o755)
    net = tmp_path / "net" / "eth9"
    net.mkdir(parents=True)
    (net / "operstate").write_text("up\n")
    return {
        "laguna_venv": str(venv),
        "laguna_model_path": str(tmp_path / "models" / "target"),
        "laguna_draft_path": str(tmp_path / "models" / "draft"),
        "preflight_nvidia_smi": os.path.join(DOUBLES, "bin", "nvidia-smi"),
        "preflight_min_free_gb": 1,
        "preflight_check_roce": False,
        "preflight_check_venv": True,
        "preflight_sysfs_net": str(tmp_path / "net"),
        "laguna_roce_ifname": "eth9",
    }


def node_tasks(result):
    """The preflight role's tasks that ran a module on the node (not skipped), by name."""
    return role_events.node_tasks(result.events, "preflight", field="task")


def test_a_good_node_passes_unchanged(runner, node):
    result = runner.include_role("preflight", node)
    assert result.rc == 0, result.text
    assert "driver 580.95.05" in result.flat
    assert result.stats["changed"].get("localhost", 0) == 0
    assert node_tasks(result) == ["Read what preflight checks on the node"]


def test_an_old_driver_fails(runner, node, monkeypatch):
    monkeypatch.setenv("LAGUNA_STANDIN_DRIVER", "575.51.02")
    result = runner.include_role("preflight", node)
    assert result.rc != 0
    assert "NVIDIA driver 575.51.02; GB10 needs 580 or newer" in result.flat


def test_too_little_disk_fails(runner, node):
    # 100 TB, the largest the input checks allow: more than any test machine has.
    result = runner.include_role("preflight", dict(node, preflight_min_free_gb=10 ** 5))
    assert result.rc != 0
    assert "GB needed (100000 GB less 0.0 GB already staged)" in result.flat


def test_missing_venv_executables_fail(runner, node, tmp_path):
    os.remove(os.path.join(node["laguna_venv"], "bin", "ray"))
    result = runner.include_role("preflight", node)
    assert result.rc != 0
    assert "missing in %s/bin: ray" % node["laguna_venv"] in result.flat


def test_a_down_roce_link_fails(runner, node, tmp_path):
    with open(os.path.join(node["preflight_sysfs_net"], "eth9", "operstate"), "w") as fh:
        fh.write("down\n")
    result = runner.include_role("preflight", dict(node, preflight_check_roce=True))
    assert result.rc != 0
    assert "eth9 is down" in result.flat and "does not carry 127.0.0.1" in result.flat


def test_stray_vllm_serve_is_killed_once(runner, node):
    stray = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve /models/old --port 8000" sleep 300'])
    try:
        time.sleep(0.2)
        first = runner.include_role("preflight", node)
        assert first.rc == 0, first.text
        assert first.stats["changed"]["localhost"] == 1
        stray.wait(timeout=10)
        second = runner.include_role("preflight", node)
        assert second.rc == 0 and second.stats["changed"].get("localhost", 0) == 0
    finally:
        if stray.poll() is None:
            stray.kill()


def test_check_mode_names_a_stray_and_leaves_it(runner, node):
    stray = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve /models/checked --port 8002" sleep 300'])
    try:
        time.sleep(0.2)
        result = runner.include_role("preflight", node, cmdline="--check")
        assert result.rc == 0, result.text
        assert "localhost: pid %d (" % stray.pid in result.flat and "/models/checked" in result.flat
        assert result.stats["changed"]["localhost"] == 1  # what a real run changes
        assert stray.poll() is None
        assert node_tasks(result) == ["Read what preflight checks on the node",
                                      "Stop vllm serve processes that the managed unit does not own"]
    finally:
        stray.kill()
        stray.wait()


def test_a_stray_vllm_serve_fails_the_run_when_asked(runner, node):
    stray = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve /models/manual --port 8001" sleep 300'])
    try:
        time.sleep(0.2)
        result = runner.include_role("preflight", dict(node, preflight_stray_action="fail"))
        assert result.rc != 0
        assert "vllm serve runs outside laguna-vllm.service" in result.flat
        assert "pid %d" % stray.pid in result.flat and "/models/manual" in result.flat
        assert stray.poll() is None  # reported, not killed
    finally:
        stray.kill()
        stray.wait()
