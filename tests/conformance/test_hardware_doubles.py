"""The hardware stand-ins against real output formats (tests/doubles/recorded, see its README).

* tests/doubles/bin/nvidia-smi vs nvidia-smi output recorded on DGX Sparks;
* tests/doubles/bin/ib_write_bw.py vs the real ib_write_bw's parser (Debian's perftest, which
  scripts/setup.sh installs: without RDMA devices it parses its options, then stops looking for one);
* the fake RDMA sysfs trees (tests/helpers/sysfs.py, used by the render and the
  unit/integration tests, and molecule's prepare.yml) vs the formats the Linux
  kernel's drivers/infiniband/core/sysfs.c prints.
"""

import json
import os
import re
import runpy
import shutil
import subprocess
import sys

import pytest
import yaml

from _conformance import ROOT
from ansible_collections.laguna.spark.plugins.module_utils import gpu_procs, perftest, roce
from helpers import gpu, sysfs

DOUBLES = os.path.join(ROOT, "tests", "doubles")
RECORDED = os.path.join(DOUBLES, "recorded")
NVIDIA_SMI = os.path.join(DOUBLES, "bin", "nvidia-smi")
IB_WRITE_BW = os.path.join(DOUBLES, "bin", "ib_write_bw.py")
FORMATS = json.load(open(os.path.join(RECORDED, "sysfs", "kernel-formats.json")))
HEADER = re.compile(r"^\| NVIDIA-SMI (\S+) +Driver Version: (\S+) +CUDA Version: (\S+) +\|$")


def recorded(name):
    return open(os.path.join(RECORDED, "nvidia-smi", name)).read()


def smi(*args, driver=None, device=None):
    env = dict(os.environ)
    if driver:
        env["LAGUNA_STANDIN_DRIVER"] = driver
    if device:
        env["LAGUNA_STANDIN_GPU_DEVICE"] = device
    return subprocess.run(["sh", NVIDIA_SMI] + list(args), capture_output=True, text=True, env=env,
                          check=False, timeout=30)


def shape(text):
    """A line-by-line shape: digits become 9, so versions/values of any size compare."""
    return [re.sub(r"\d", "9", line) for line in text.splitlines()]


def test_driver_query_has_the_recorded_shape():
    real = recorded("query-driver_version.csv")
    ours = smi("--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?\n", real)
    assert ours == real  # one GPU, one line, the bare version
    # what the preflight role does with it: first line, trimmed, compared as a version
    from ansible.plugins.test.core import version_compare
    assert version_compare(ours.splitlines()[0].strip(), "580", ">=")
    assert not version_compare(smi("--query-gpu=driver_version", "--format=csv,noheader",
                                   driver="575.57.08").stdout.strip(), "580", ">=")


def test_name_query_is_the_recorded_one():
    assert smi("--query-gpu=name", "--format=csv,noheader").stdout == recorded("query-name.csv")


def test_default_table_is_the_recorded_one():
    real = recorded("default-580.126.09.txt")
    assert smi(driver="580.126.09").stdout == real
    ours = smi().stdout
    assert shape(ours)[2:] == shape(real)[2:]
    match = HEADER.match(ours.splitlines()[1])
    assert match and match.group(1) == match.group(2) == "580.95.05" and match.group(3) == "13.0"
    assert len(ours.splitlines()[1]) == len(real.splitlines()[1])


def test_unknown_query_field_fails_like_nvidia_smi():
    result = smi("--query-gpu=bogus", "--format=csv,noheader")
    assert result.returncode != 0 and "is not a valid field to query" in result.stderr


COMPUTE_APPS = ("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
COMPUTE_APP_LINE = re.compile(r"^\d+, \S[^\n]*, \d+$")


def test_compute_apps_query_has_the_recorded_shape(tmp_path):
    device = tmp_path / "nvidia0"
    device.touch()
    assert smi(*COMPUTE_APPS, device=str(device)).stdout == recorded("query-compute-apps-none.csv") == ""
    with gpu.holding(device) as holder:
        ours = smi(*COMPUTE_APPS, device=str(device)).stdout
        with_units = smi(COMPUTE_APPS[0], "--format=csv,noheader", device=str(device)).stdout
    real = recorded("query-compute-apps-nounits.csv")
    for text in (real, ours):
        assert text.endswith("\n") and all(COMPUTE_APP_LINE.match(line) for line in text.splitlines()), text
    # what the gpu_processes module reads from each
    assert gpu_procs.parse(real) == [{"pid": 4242, "name": "ray::RayWorkerProc.run", "used_mib": 91419}]
    assert [p["pid"] for p in gpu_procs.parse(ours)] == [holder.pid]
    assert with_units.endswith(" MiB\n") and gpu_procs.parse(with_units) == gpu_procs.parse(ours)


def test_unknown_compute_apps_field_fails_like_nvidia_smi():
    result = smi("--query-compute-apps=bogus", "--format=csv,noheader")
    assert result.returncode != 0 and "is not a valid field to query" in result.stderr


def _files(root):
    for base, _dirs, names in os.walk(root):
        for name in names:
            yield os.path.relpath(os.path.join(base, name), root), open(os.path.join(base, name)).read()


@pytest.fixture(scope="module")
def spark_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("sys")
    ib, _net = sysfs.spark(str(root), extra="10.0.0.7")
    return ib


def test_fake_gid_tables_print_like_the_kernel(spark_tree):
    gid_re = re.compile(FORMATS["ports/<port>/gids/<n>"]["regex"])
    types = {v + "\n" for v in FORMATS["ports/<port>/gid_attrs/types/<n>"]["values"]}
    ndev_re = re.compile(FORMATS["ports/<port>/gid_attrs/ndevs/<n>"]["regex"])
    states = FORMATS["ports/<port>/state"]["names"]
    seen = {"gids": 0, "types": 0, "ndevs": 0, "state": 0}
    for rel, text in _files(spark_tree):
        parts = rel.split(os.sep)
        if "gids" in parts:
            assert gid_re.match(text), (rel, text)
            seen["gids"] += 1
        elif "types" in parts:
            assert text in types, (rel, text)
            gid = open(os.path.join(spark_tree, *parts[:-3], "gids", parts[-1])).read().strip()
            assert gid != sysfs.ZERO, "a type for an unpopulated GID (the kernel fails that read)"
            seen["types"] += 1
        elif "ndevs" in parts:
            assert ndev_re.match(text), (rel, text)
            seen["ndevs"] += 1
        elif parts[-1] == "state" and "ports" in parts:
            match = re.fullmatch(r"(\d): (\w+)\n", text)
            assert match and states[int(match.group(1))] == match.group(2), (rel, text)
            seen["state"] += 1
        elif parts[-1] == "link_layer":
            assert text.rstrip("\n") in FORMATS["ports/<port>/link_layer"]["values"]
    assert all(seen.values()), seen


def test_reader_finds_the_roce_v2_gid_in_the_fake_tree(spark_tree):
    entries = roce.scan_gids(spark_tree, "rocep1s0f1", 1)
    found = roce.find_gid(entries, "192.168.100.1")
    assert found["type"] == "RoCE v2" and found["index"] == 5  # after fe80 v1/v2 and 10.0.0.7 v1/v2


def test_mapped_gid_is_kernel_ipv6_full_form():
    # %pI6 prints eight zero-padded lowercase groups: the same bytes as Python's exploded form
    import ipaddress
    for ip in ("192.168.100.1", "10.0.0.7", "1.2.3.4"):
        assert sysfs.mapped(ip) == ipaddress.IPv6Address("::ffff:" + ip).exploded


def test_molecule_fake_sysfs_uses_the_kernel_formats():
    text = open(os.path.join(ROOT, "molecule", "default", "prepare.yml")).read()
    plays = yaml.safe_load(text)
    assert plays
    assert "'4: ACTIVE'" in text or '"4: ACTIVE"' in text
    fmt = re.search(r"'(0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x)'", text)
    assert fmt, "prepare.yml no longer writes IPv4-mapped GIDs with the kernel's %pI6 layout"
    for kind in re.findall(r"'(IB/RoCE v1|RoCE v2|RoCE v1|IB/RoCE v2)'", text):
        assert kind in FORMATS["ports/<port>/gid_attrs/types/<n>"]["values"], kind


# --- ib_write_bw: the stand-in's parser against the real one's ---------------------------------


def _real_ib_write_bw(argv):
    real = shutil.which("ib_write_bw") or "/usr/bin/ib_write_bw"
    assert os.path.exists(real), "perftest is not installed (scripts/setup.sh installs it)"
    done = subprocess.run([real] + argv, capture_output=True, text=True, check=False, timeout=30)
    return done.returncode, done.stdout + done.stderr


def test_the_ib_write_bw_standin_parses_what_the_real_one_parses_and_refuses_what_it_refuses(tmp_path):
    standin = runpy.run_path(IB_WRITE_BW, run_name="ib_write_bw_standin")
    rc, usage = _real_ib_write_bw(["--help"])
    assert "ib_write_bw <host>     connect to server at <host>" in usage, usage[:2000]  # --help exits 1
    # The role's exact command lines (ib_bw_check's plan), server's and client's.
    declared = []
    pairs = perftest.schedule(perftest.plan_pairs(sysfs.fabric_node("head", 1), sysfs.fabric_node("worker", 2),
                                                  duration=5), 5)
    for pair in pairs:
        for argv in (pair["server_argv"], pair["client_argv"]):
            declared += [arg for arg in argv[1:] if arg.startswith("-")]
            # The real parser takes the role's exact command line and goes on to look for the device...
            rc, out = _real_ib_write_bw(argv[1:])
            assert rc == 1 and "Unable to find the Infiniband/RoCE device" in out, out
            assert "Invalid Command or flag" not in out, out
            # ...and so does the stand-in's.
            standin["parse"](argv[1:])
    # Each option the role passes, and each the stand-in takes, is one the real parser lists.
    declared += [option for action in standin["build_parser"]()._actions for option in action.option_strings]
    for option in sorted(set(declared)):
        assert re.search(r"(^|[ ,])%s([=, ]|$)" % re.escape(option), usage, re.M), option
    # What the real parser refuses, the stand-in refuses (exit 1), before any rendezvous.
    for argv in (["--bogus", "10.0.0.2"], ["-d"], ["-x"]):
        rc, out = _real_ib_write_bw(argv)
        assert rc == 1 and "Invalid Command or flag" in out, (argv, out)
        done = subprocess.run([sys.executable, IB_WRITE_BW] + argv, capture_output=True, text=True, check=False,
                              timeout=30, env=dict(os.environ, IB_WRITE_BW_STANDIN_DIR=str(tmp_path)))
        assert done.returncode == 1 and "Invalid Command or flag" in done.stderr, (argv, done.stderr)
    assert os.listdir(str(tmp_path)) == []
