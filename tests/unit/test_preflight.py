"""The preflight role's probe (module preflight_info, module_utils/preflight.py): the driver, the
room for the checkpoints, the RoCE link, the venv, SSH to the workers, the page cache and stray
processes; each message names the node, what was found and what is needed."""
import getpass
import os
import subprocess
import time

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import page_cache, preflight
from ansible_collections.laguna.spark.plugins.modules import preflight_info
from helpers import DOUBLES


@pytest.mark.parametrize("version, ok", [
    ("580.95.05", True), ("580", True), ("590.10", True), ("1000.1", True),
    ("575.51.02", False), ("58.0", False), ("", False), ("N/A", False)])
def test_the_driver_compares_as_ansibles_version_test(version, ok):
    assert preflight.driver(0, [version], "", "580", "spark-1")["ok"] is ok


def test_the_driver_messages_name_the_version_or_why_it_is_unreadable():
    assert preflight.driver(0, ["580.95.05"], "", "580", "spark-1") == {"ok": True, "msg": "driver 580.95.05"}
    assert preflight.driver(0, ["575.51.02"], "", "580", "spark-1")["msg"] == \
        "spark-1: NVIDIA driver 575.51.02; GB10 needs 580 or newer."
    assert preflight.driver(0, [], "", "580", "spark-1")["msg"] == "spark-1: NVIDIA driver ?; GB10 needs 580 or newer."
    failed = preflight.driver(9, [], "NVIDIA-SMI has failed because it couldn't communicate with the driver.\n",
                              "580", "spark-1")
    assert not failed["ok"] and failed["msg"] == ("spark-1: NVIDIA driver not readable (NVIDIA-SMI has failed because "
                                                  "it couldn't communicate with the driver.); GB10 needs 580 or newer.")


def test_staged_checkpoints_count_as_room_and_the_need_never_goes_below_zero():
    assert preflight.space(30 * 10 ** 9, 100 * 10 ** 9, 122, "/m", "s") == {
        "ok": True, "needed": 22 * 10 ** 9, "msg": "30.0 GB free"}
    assert preflight.space(0, 200 * 10 ** 9, 122, "/m", "s")["needed"] == 0
    short = preflight.space(21_950_000_000, 100_000_000_000, 122, "/home/spark/models/hf", "spark-2")
    assert not short["ok"] and short["msg"] == ("spark-2: 21.9 GB free for /home/spark/models/hf, 22.0 GB needed "
                                                "(122 GB less 100.0 GB already staged).")
    assert preflight.space(5, 0, 100000, "/m", "s")["msg"].endswith("GB needed (100000 GB less 0.0 GB already staged).")


def test_the_roce_link_needs_up_the_address_and_an_active_port():
    addr = "7: enp1s0f1np1    inet 10.89.77.11/24 brd 10.89.77.255 scope global enp1s0f1np1\\ ..."
    good = preflight.roce("up\n", addr, "4: ACTIVE\n", "enp1s0f1np1", "10.89.77.11", "rocep1s0f1", 1, "spark-1")
    assert good == {"ok": True, "msg": "enp1s0f1np1 up with 10.89.77.11, 4: ACTIVE"}
    # 10.89.77.1 is not 10.89.77.11: the address is matched whole.
    assert not preflight.roce("up", addr, "4: ACTIVE", "e", "10.89.77.1", "h", 1, "s")["ok"]
    down = preflight.roce("down\n", "", "1: DOWN", "eth9", "127.0.0.1", "rocep1s0f1", 1, "spark-1")
    assert down == {"ok": False, "msg": "spark-1: eth9 is down, does not carry 127.0.0.1, RDMA port rocep1s0f1/1 is "
                                        "1: DOWN. Check the cable, `ip addr`, and `ibv_devinfo`."}
    missing = preflight.roce("", addr, "", "enp1s0f1np1", "10.89.77.11", "rocep1s0f1", 1, "spark-1")
    assert missing["msg"] == ("spark-1: enp1s0f1np1 is missing, has 10.89.77.11, RDMA port rocep1s0f1/1 is missing. "
                              "Check the cable, `ip addr`, and `ibv_devinfo`.")


def test_missing_executables_keep_their_order_once_each(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ray").write_text("")
    assert preflight.missing_executables(str(tmp_path), ["vllm", "ray", "hf", "vllm"]) == ["vllm", "hf"]
    assert preflight.missing_executables(str(tmp_path), ["ray"]) == []
    # A dangling link does not run: it is missing.
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "bin" / "hf"))
    assert preflight.missing_executables(str(tmp_path), ["hf"]) == ["hf"]


def test_free_space_is_measured_at_the_nearest_existing_parent(tmp_path):
    where, free = preflight.free_bytes(str(tmp_path / "models" / "hf" / "target"))
    assert where == str(tmp_path)
    stat = os.statvfs(str(tmp_path))
    assert abs(free - stat.f_bavail * stat.f_frsize) < 64 << 20  # the same filesystem, read twice
    df = subprocess.run(["df", "-P", "-B1", str(tmp_path)], capture_output=True, text=True, check=True)
    assert abs(free - int(df.stdout.splitlines()[1].split()[3])) < 64 << 20  # what the role's df printed


def test_staged_bytes_count_both_trees_as_model_stage_info_does(tmp_path):
    target, draft = tmp_path / "target", tmp_path / "draft"
    (target / ".cache").mkdir(parents=True)
    (target / "model-00001-of-00002.safetensors").write_bytes(b"x" * 100)
    (target / "model-00002-of-00002.safetensors.incomplete").write_bytes(b"x" * 50)
    (target / ".cache" / "meta").write_bytes(b"x" * 7)
    draft.mkdir()
    (draft / "config.json").write_bytes(b"x" * 3)
    assert preflight.staged_bytes([str(target), str(draft), str(tmp_path / "absent")]) == 103


def test_the_roce_state_is_read_from_sysfs(tmp_path):
    (tmp_path / "net" / "eth9").mkdir(parents=True)
    (tmp_path / "net" / "eth9" / "operstate").write_text("up\n")
    (tmp_path / "ib" / "hca" / "ports" / "1").mkdir(parents=True)
    (tmp_path / "ib" / "hca" / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    assert preflight.roce_state(str(tmp_path / "net"), "eth9", str(tmp_path / "ib"), "hca", 1) == ("up", "4: ACTIVE")
    assert preflight.roce_state(str(tmp_path / "net"), "eth8", str(tmp_path / "ib"), "hca", 2) == ("", "")


def test_ssh_runs_as_the_service_user_with_the_roles_argv():
    assert preflight.run_as("spark", "spark", "/usr/sbin/runuser") == []
    assert preflight.run_as("spark", "root", "/usr/sbin/runuser") == ["/usr/sbin/runuser", "-u", "spark", "--"]
    assert preflight.ssh_argv("ssh", ["-o", "BatchMode=yes"], "spark", "10.89.77.12") == [
        "ssh", "-o", "BatchMode=yes", "spark@10.89.77.12", "true"]


def test_differences_name_each_stray_and_the_cached_pages():
    stray = {"pid": 42, "cmdline": "vllm serve /models/old", "unit": "session-3.scope", "uid": 1000}
    lone = dict(stray, pid=43, unit="")
    assert preflight.differences("spark-1", [stray, lone], "laguna-vllm.service", {"cached_bytes": 2.5e9}) == [
        "spark-1: pid 42 (session-3.scope) runs outside laguna-vllm.service: vllm serve /models/old",
        "spark-1: pid 43 (no unit) runs outside laguna-vllm.service: vllm serve /models/old",
        "spark-1: 2.50 GB of the model trees in the page cache, to drop"]
    assert preflight.differences("s", [], "u", {"cached_bytes": 0}) == []
    assert preflight.differences("s", [], "u", None) == []


@pytest.fixture
def node(tmp_path):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    for exe in ("vllm", "ray"):
        (tmp_path / "venv" / "bin" / exe).write_text("#!/bin/sh\n")
    (tmp_path / "net" / "lo9").mkdir(parents=True)
    (tmp_path / "net" / "lo9" / "operstate").write_text("up\n")
    return {"node": "spark-1", "nvidia_smi": os.path.join(DOUBLES, "bin", "nvidia-smi"),
            "model_path": str(tmp_path / "models" / "target"), "draft_path": str(tmp_path / "models" / "draft"),
            "min_free_gb": 1}


def test_the_probe_reads_a_good_node_and_finds_nothing_to_do(run_module, node):
    result = run_module(preflight_info, dict(node, page_cache_paths=[node["model_path"], node["draft_path"]],
                                             stray_pattern="[n]o such process anywhere", stray_unit="x.service"))
    assert not result.failed and not result["changed"]
    assert result["driver"] == {"ok": True, "msg": "driver 580.95.05", "version": "580.95.05"}
    assert result["space"]["ok"] and result["space"]["staged"] == 0 and result["space"]["needed"] == 10 ** 9
    assert result["missing_executables"] == [] and result["roce"] == {} and result["ssh"] == []
    assert result["page_cache"]["cached_bytes"] == 0 and result["strays"] == [] and result["differences"] == []


def test_the_probe_judges_what_it_read(run_module, node, tmp_path, monkeypatch):
    monkeypatch.setenv("LAGUNA_STANDIN_DRIVER", "575.51.02")
    result = run_module(preflight_info, dict(
        node, min_free_gb=100000, venv=str(tmp_path / "venv"), executables=["vllm", "ray", "hf"],
        roce={"ifname": "lo9", "address": "10.89.77.11", "hca": "hca", "sysfs_net": str(tmp_path / "net"),
              "sysfs_infiniband": str(tmp_path / "ib")}))
    assert result["driver"]["msg"] == "spark-1: NVIDIA driver 575.51.02; GB10 needs 580 or newer."
    assert result["missing_executables"] == ["hf"]
    assert result["space"]["msg"].endswith("GB needed (100000 GB less 0.0 GB already staged).")
    assert result["space"]["where"] == str(tmp_path)
    assert result["roce"] == {"ok": False, "msg": "spark-1: lo9 is up, does not carry 10.89.77.11, RDMA port hca/1 is "
                                                  "missing. Check the cable, `ip addr`, and `ibv_devinfo`."}


def test_the_probe_explains_an_nvidia_smi_it_cannot_run(run_module, node, tmp_path):
    result = run_module(preflight_info, dict(node, nvidia_smi=str(tmp_path / "nvidia-smi")))
    assert not result["driver"]["ok"] and result["driver"]["version"] == ""
    assert result["driver"]["msg"].startswith("spark-1: NVIDIA driver not readable ([Errno 2] No such file")


def test_the_probe_runs_ssh_to_each_target_and_returns_why_it_failed(run_module, node, tmp_path, monkeypatch):
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\necho "$@" >> %s\ncase "$*" in *@10.0.0.3*) '
                              'echo "Permission denied (publickey)." >&2; exit 255;; esac\n' % (tmp_path / "calls"))
    (fake / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (fake, os.environ["PATH"]))
    user = getpass.getuser()
    result = run_module(preflight_info, dict(node, ssh_user=user, ssh_options=["-o", "BatchMode=yes"],
                                             ssh_targets={"spark-2": "10.0.0.2", "spark-3": "10.0.0.3"}))
    assert result["ssh"] == [{"name": "spark-2", "address": "10.0.0.2", "rc": 0, "stderr": ""},
                             {"name": "spark-3", "address": "10.0.0.3", "rc": 255,
                              "stderr": "Permission denied (publickey)."}]
    assert (tmp_path / "calls").read_text().splitlines() == ["-o BatchMode=yes %s@10.0.0.2 true" % user,
                                                             "-o BatchMode=yes %s@10.0.0.3 true" % user]


def test_the_probe_finds_cached_pages_and_strays(run_module, node, tmp_path):
    target = tmp_path / "models" / "target"
    target.mkdir(parents=True)
    shard = target / "model-00001-of-00001.safetensors"
    shard.write_bytes(os.urandom(4 << 20))
    shard.read_bytes()
    stray = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve /models/probe-test" sleep 300'])
    try:
        time.sleep(0.2)
        result = run_module(preflight_info, dict(node, page_cache_paths=[str(target)],
                                                 stray_pattern="[v]llm serve /models/probe-test",
                                                 stray_unit="laguna-vllm.service"))
    finally:
        stray.kill()
        stray.wait()
    assert result["space"]["staged"] == 4 << 20
    assert result["page_cache"]["cached_bytes"] == page_cache.cached_bytes(str(shard)) > 0
    assert [s["pid"] for s in result["strays"]] == [stray.pid]
    assert len(result["differences"]) == 2 and "pid %d" % stray.pid in result["differences"][0]
    assert result["differences"][1].endswith("GB of the model trees in the page cache, to drop")
    assert not result["changed"] and page_cache.cached_bytes(str(shard)) > 0  # nothing dropped
