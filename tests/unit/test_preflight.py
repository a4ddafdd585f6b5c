"""The preflight role's checks (module_utils/preflight.py and the preflight_* filters): the driver,
the room for the checkpoints, the RoCE link; each message names the node, what was found and what
is needed."""
import base64

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import preflight
from helpers.filters import run_filter


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


def _slurp(text):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def test_the_filters_read_the_task_results():
    good, missing, bad = run_filter("preflight", "preflight_driver", [
        [{"rc": 0, "stdout_lines": ["580.95.05"], "stderr": ""}, "580", "h"],
        [{"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-smi'"}, "580", "h"],
        ["580", "580", "h"]])
    assert good == {"ok": True, "msg": "driver 580.95.05"}
    # nvidia-smi not found: the command module's msg explains it.
    assert missing == {"ok": False, "msg": "h: NVIDIA driver not readable ([Errno 2] No such file or directory: "
                                           "b'nvidia-smi'); GB10 needs 580 or newer."}
    assert bad.startswith("Ansible") and bad.endswith("preflight_driver: the input must be a task result")
    room, short, bad = run_filter("preflight", "preflight_space", [
        ["130000000000", [{"total_bytes": 0}, {"total_bytes": 0}], 122, "/m", "h"],
        ["", [{"total_bytes": 1000}], 1, "/m", "h"],
        ["1", "not a list", 1, "/m", "h"]])
    assert room["ok"] and not short["ok"] and short["needed"] == 10 ** 9 - 1000
    assert "staged must be the model_stage_info results" in bad
    link, failed_reads = run_filter("preflight", "preflight_roce", [
        [_slurp("up\n"), {"stdout": "2: e inet 10.0.0.1/24 scope global"}, _slurp("4: ACTIVE\n"), "e", "10.0.0.1",
         "hca", 1, "h"],
        [{"failed": True, "msg": "file not found"}, {"rc": 1, "stdout": ""}, {"failed": True}, "e", "10.0.0.1",
         "hca", 1, "h"]])
    assert link == {"ok": True, "msg": "e up with 10.0.0.1, 4: ACTIVE"}
    assert failed_reads["msg"] == ("h: e is missing, does not carry 10.0.0.1, RDMA port hca/1 is missing. "
                                   "Check the cable, `ip addr`, and `ibv_devinfo`.")
