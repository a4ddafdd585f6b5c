"""The venv and fabric roles on localhost: pip from a local index, netplan generate on the rendered file."""
import getpass
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from standin_wheels import Index, build_index

from helpers import interrupt, role_events
from helpers.sysfs import make_port, mapped, spark

pytestmark = pytest.mark.integration


@pytest.fixture
def index(tmp_path):
    served = Index(build_index(str(tmp_path / "index")))
    yield served
    served.close()


@pytest.fixture
def cuda(tmp_path):
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    return str(home)


def venv_vars(tmp_path, index, cuda):
    return {"laguna_venv": str(tmp_path / "venvs" / "vllm-025"), "laguna_cuda_home": cuda,
            "laguna_model_path": str(tmp_path / "m"), "laguna_draft_path": str(tmp_path / "d"),
            "venv_index_url": index.url, "venv_extra_index_urls": [], "venv_system_packages": [],
            "venv_python": "/usr/bin/python3",
            "venv_pip_args": ["--no-cache-dir"]}


def test_venv_from_bare_then_unchanged(runner, tmp_path, index, cuda):
    extra = venv_vars(tmp_path, index, cuda)
    first = runner.include_role("venv", extra)
    assert first.rc == 0, first.text
    assert first.stats["changed"].get("localhost", 0) >= 2  # venv created, pins installed
    assert "/simple/vllm/" in index.requests and "/simple/torch/" in index.requests
    venv = extra["laguna_venv"]
    for exe in ("vllm", "ray", "hf", "ninja"):
        assert os.access(os.path.join(venv, "bin", exe), os.X_OK), exe
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "list", "--format", "freeze"],
                         capture_output=True, text=True, check=True).stdout
    assert "vllm==0.25.1" in out and "torch==2.11.0+cu130" in out
    assert "release 13.0" in first.flat

    index.requests.clear()
    second = runner.include_role("venv", extra)
    assert second.rc == 0, second.text
    assert second.stats["changed"].get("localhost", 0) == 0
    assert index.requests == []  # no pip install ran
    # On a venv as wanted, the probe is the one task of the role that reaches the node.
    assert role_events.node_tasks(second.events, "venv") == ["laguna.spark.venv_probe"], second.text

    # Check mode on a pin the venv does not meet: the role says what a run would install, and installs nothing.
    check = runner.include_role("venv", dict(extra, venv_pins=["vllm==0.25.2"]), cmdline="--check")
    assert check.rc == 0, check.text
    assert "pins to install: vllm==0.25.2 (installed: 0.25.1)" in check.flat, check.text
    assert "Install the pinned packages (vllm==0.25.2)" in check.flat, check.text
    assert index.requests == []

    # No nvcc on the raylets' PATH: the role says where it looked.
    nocuda = str(tmp_path / "no-cuda")
    result = runner.include_role("venv", dict(extra, laguna_cuda_home=nocuda, venv_path_base="/nonexistent"))
    assert result.rc != 0
    assert "nvcc does not run from %s/bin" % nocuda in result.flat, result.text

    # A pin the index cannot meet: pip runs and the role fails naming it.
    result = runner.include_role("venv", dict(extra, venv_pins=["vllm==0.25.2"]))
    assert result.rc != 0
    assert "vllm==0.25.2" in result.flat


def test_fabric_on_two_twins_renders_netplan_that_generates(runner, tmp_path):
    ib, net = spark(tmp_path / "hw")
    # netplan not applied here: fabric_manage_netplan false; the file is checked with netplan generate
    (tmp_path / "root" / "etc" / "netplan").mkdir(parents=True, exist_ok=True)
    result = runner.run(
        "    - ansible.builtin.include_role:\n        name: laguna.spark.fabric\n"
        "    - ansible.builtin.copy:\n        dest: %s/root/etc/netplan/60-laguna-fabric.yaml\n"
        "        content: '{{ fabric_facts.netplan }}'\n        mode: '0600'\n"
        "    - ansible.builtin.debug:\n        msg: 'ENV {{ fabric_nccl_env | to_json }}'\n" % tmp_path,
        {"laguna_sysfs_infiniband": ib, "fabric_sysfs_net": net, "laguna_roce_ip": "192.168.100.1",
         "fabric_manage_netplan": False, "laguna_model_path": "/m", "laguna_draft_path": "/d"})
    assert result.rc == 0, result.text
    env_line = result.flat.split("ENV ", 2)[-1]
    assert "=rocep1s0f1:1,roceP2p1s0f1:1" in env_line and "NCCL_IB_GID_INDEX" not in env_line
    assert "rocep1s0f1 enp1s0f1np1 192.168.100.1/24; roceP2p1s0f1 enP2p1s0f1np1 192.168.101.1/24; GID policy nccl" in result.flat
    assert "fabric_manage_netplan is false; netplan left alone" in result.flat
    # One read: the probe is the one task of the role that reaches the node (was two discoveries).
    assert role_events.node_tasks(result.events, "fabric") == ["laguna.spark.fabric_probe"], result.text
    netplan = shutil.which("netplan") or "/usr/sbin/netplan"
    assert os.path.exists(netplan), "netplan is not installed (scripts/setup.sh installs netplan.io)"
    root = tmp_path / "root"
    subprocess.run([netplan, "generate", "--root-dir", str(root)], check=True, capture_output=True)
    generated = {p.name: p.read_text() for p in (root / "run" / "systemd" / "network").glob("*")}
    net_twin1 = generated["10-netplan-enP2p1s0f1np1.network"]
    assert "Address=192.168.101.1/24" in net_twin1
    assert "MTUBytes=9000" in generated["10-netplan-enp1s0f1np1.network"] + generated.get("10-netplan-enp1s0f1np1.link", "")


def _outcome(text, task):
    """What the default callback printed for ``task`` on localhost: ok, changed, skipping or failed."""
    block = text.split("%s] " % task, 1)[1].split("TASK [", 1)[0]
    return re.search(r"^(ok|changed|skipping|failed|fatal): \[localhost\]", block, re.M).group(1)


def test_fabric_managing_netplan_reads_once_on_a_node_as_wanted_and_names_each_difference(
        runner, tmp_path, monkeypatch):
    """The role with its netplan part (the twins are PCI devices), the netplan file in tmp_path and a
    fake `ip` giving each twin its address. --check on a node without the file: the probe names it,
    `netplan generate` validates the document (for real), nothing is written or applied. With the file
    as the role writes it, a run reaches the node once (the probe) and changes nothing. The second
    twin's MTU back at 1500 (issue 20): --check names it and would apply the netplan again without
    writing the file."""
    from helpers.fake_bin import on_path

    ip = ("#!/bin/sh\ncat <<'EOF'\n"
          "4: enp1s0f1np1    inet 127.0.0.1/24 scope global enp1s0f1np1\n"
          "5: enP2p1s0f1np1    inet 127.0.1.1/24 scope global enP2p1s0f1np1\n"
          "EOF\n")
    on_path(monkeypatch, tmp_path / "bin", {"ip": ip})
    plan = tmp_path / "netplan" / "60-laguna-fabric.yaml"
    extra = {"fabric_netplan_file": str(plan), "laguna_model_path": "/m", "laguna_draft_path": "/d"}

    check = runner.include_role("fabric", extra, cmdline="--check --diff")
    assert check.rc == 0, check.text
    assert "%s: missing, to write" % plan in check.flat, check.text
    assert _outcome(check.text, "Validate it with netplan generate") == "ok", check.text
    assert _outcome(check.text, "Write the netplan file") == "changed", check.text
    assert "GID policy checked after netplan apply" not in check.flat  # the addresses are in place already
    assert not plan.exists()

    # The file as the role writes it (fabric_facts.netplan).
    plan.parent.mkdir()
    written = runner.run(
        "    - ansible.builtin.include_role:\n        name: laguna.spark.fabric\n        tasks_from: discover\n"
        "    - ansible.builtin.copy:\n        dest: %s\n        content: '{{ fabric_facts.netplan }}'\n"
        "        mode: '0600'\n" % plan, extra)
    assert written.rc == 0, written.text
    again = runner.include_role("fabric", extra)
    assert again.rc == 0 and again.stats["changed"].get("localhost", 0) == 0, again.text
    assert role_events.node_tasks(again.events, "fabric") == ["laguna.spark.fabric_probe"], again.text
    assert _outcome(again.text, "What differs from the wanted fabric") == "skipping", again.text

    (tmp_path / "sys" / "net" / "enP2p1s0f1np1" / "mtu").write_text("1500\n")
    before = plan.read_text()
    drift = runner.include_role("fabric", extra, cmdline="--check --diff")
    assert drift.rc == 0, drift.text
    assert "enP2p1s0f1np1: MTU 1500, wanted 9000" in drift.flat, drift.text
    assert _outcome(drift.text, "Write the netplan file") == "skipping", drift.text
    # a real run would apply again (in check mode the command says so and does not run), and not validate
    assert _outcome(drift.text, "Run netplan apply") == "changed", drift.text
    assert _outcome(drift.text, "Validate it with netplan generate") == "skipping", drift.text
    assert plan.read_text() == before


def _one_device_tree(tmp_path):
    """A fake tree with one RDMA device and no PCI device behind it (as in the containers)."""
    return make_port(tmp_path / "one", {3: (mapped("127.0.0.1"), "RoCE v2")})


def test_fabric_on_fake_tree_skips_netplan(runner, tmp_path):
    """A fake tree (no PCI device): discovery only, one twin allowed."""
    result = runner.include_role("fabric", {"fabric_min_twins": 1, "laguna_model_path": "/m", "laguna_draft_path": "/d",
                                            "laguna_sysfs_infiniband": _one_device_tree(tmp_path)})
    assert result.rc == 0, result.text
    assert "(a fake tree); netplan left alone" in result.flat
    assert "GID policy nccl" in result.flat
    assert result.stats["changed"].get("localhost", 0) == 0


def test_fabric_wants_two_twins_by_default(runner, tmp_path):
    result = runner.include_role("fabric", {"laguna_model_path": "/m", "laguna_draft_path": "/d",
                                            "laguna_sysfs_infiniband": _one_device_tree(tmp_path)})
    assert result.rc != 0
    assert "the cabled port shows rocep1s0f1 (1), 2 expected" in result.flat


NETWORK_GATE = "    - ansible.builtin.include_role:\n        name: laguna.spark.network_gate\n"


def _two_local_nodes(head_vars, worker_vars):
    """An inventory of a head (localhost, 127.0.0.1) and a worker (127.0.0.2), both run locally."""
    return ("[spark_head]\nlocalhost ansible_connection=local laguna_roce_ip=127.0.0.1 "
            "ansible_python_interpreter={py} {head}\n"
            "[spark_workers]\nworker ansible_connection=local laguna_roce_ip=127.0.0.2 "
            "ansible_python_interpreter={py} {worker}\n").format(py=sys.executable, head=head_vars, worker=worker_vars)


def test_a_worker_that_fails_in_its_fabric_discovery_stops_the_head_in_network_gate_in_one_sentence(
        runner, tmp_path):
    """The worker has no RoCE v2 GID for its address and fails in the fabric
    discovery; the head, which reads every node's fabric facts, stops with one
    sentence naming the worker (not an internal error)."""
    from staging_env import run_play

    head = make_port(tmp_path / "head-ib", {3: (mapped("127.0.0.1"), "RoCE v2")})
    good = make_port(tmp_path / "good-ib", {3: (mapped("127.0.0.2"), "RoCE v2")})
    worker = make_port(tmp_path / "worker-ib", {2: (mapped("127.0.0.2"), "IB/RoCE v1")})

    def run(worker_tree):
        return run_play(runner, NETWORK_GATE,
                        {"laguna_user": getpass.getuser(), "fabric_min_twins": 1, "network_gate_check_ssh": False,
                         "laguna_model_path": "/m", "laguna_draft_path": "/d"},
                        _two_local_nodes("laguna_sysfs_infiniband={}".format(head),
                                         "laguna_sysfs_infiniband={}".format(worker_tree)))

    # Both nodes discover their fabric: the plan reads both (laguna.spark.fabric_nodes).
    planned = run(good)
    assert planned.rc == 0, planned.text
    assert ("The fabric of localhost, worker is a fake sysfs tree; not measured. The commands would be: "
            "ib_write_bw -d rocep1s0f1 -i 1 -x 3 -p 18515") in planned.flat and "127.0.0.2" in planned.flat
    # A fake fabric is not measured: the probe is the one task of network_gate that reaches each node.
    for host in ("localhost", "worker"):
        assert role_events.node_tasks(planned.events, "network_gate", host) == ["laguna.spark.network_gate_probe"], \
            (host, planned.text)

    result = run(worker)
    assert result.rc != 0
    assert "No GID policy (auto) gives NCCL the RoCE v2 GID" in result.flat  # the worker's own failure
    assert ("worker failed earlier in this run (its error is above), so network_gate on localhost stops here "
            "(it needs worker's fabric_facts): fix what failed on worker and rerun.") in result.flat, result.flat[-3000:]
    assert "list index out of range" not in result.flat and "HostVarsVars" not in result.flat
    assert result.stats["failures"] == {"localhost": 1, "worker": 1}


def test_the_bandwidth_gate_measures_every_twin_one_at_a_time_and_names_a_slow_one(runner, tmp_path):
    """Two nodes whose fabric looks like hardware (both twins with a PCI
    address) and the ib_write_bw stand-in (tests/doubles/bin/ib_write_bw.py):
    every server starts first, the clients run one after the other with the
    planned command lines, and the gate passes on the recorded healthy
    reports and records the measurement; the gate again, with nothing
    changed, measures nothing (the probe is the one task that reaches each
    node); the gate with network_gate_remeasure, on the second twin's report
    of a degraded link, fails naming that twin and its figure, and leaves no
    record, so the next run measures again."""
    from helpers import DOUBLES
    from staging_env import run_play

    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    tool = tmp_path / "ib_write_bw"
    tool.write_text("#!/bin/sh\nIB_WRITE_BW_STANDIN_DIR=%s exec %s %s \"$@\"\n"
                    % (rendezvous, sys.executable, os.path.join(DOUBLES, "bin", "ib_write_bw.py")))
    tool.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    record = home / ".local" / "state" / "laguna-spark" / "network_gate.json"
    trees = [spark(tmp_path / "head", "127.0.0.1", "127.0.1.1"), spark(tmp_path / "worker", "127.0.0.2", "127.0.1.2")]
    inventory = _two_local_nodes(*["laguna_sysfs_infiniband=%s fabric_sysfs_net=%s" % tree for tree in trees])
    gate = {"laguna_user": getpass.getuser(), "laguna_home": str(home), "network_gate_check_ssh": False,
            "network_gate_install": False, "network_gate_tool_path": str(tool), "network_gate_duration": 1,
            "laguna_model_path": "/m", "laguna_draft_path": "/d"}

    def runs():
        return [json.loads(line) for line in (rendezvous / "runs.jsonl").read_text().splitlines()]

    result = run_play(runner, NETWORK_GATE, gate, inventory)
    assert result.rc == 0, result.text
    assert "no measurement recorded; measure" in result.flat, result.flat[-3000:]
    first = runs()
    assert len(first) == 4  # the gate's two servers and two clients
    servers = [run for run in first if run["role"] == "server"]
    clients = [run for run in first if run["role"] == "client"]
    assert [run["argv"] for run in clients] == [
        ["-d", device, "-i", "1", "-x", "3", "-p", port, "-D", "1", "-s", "1048576", "-q", "4", "-F", "--report_gbits",
         address] for device, port, address in (("rocep1s0f1", "18515", "127.0.0.2"),
                                                ("roceP2p1s0f1", "18516", "127.0.1.2"))]
    assert sorted(run["argv"][1] for run in servers) == ["roceP2p1s0f1", "rocep1s0f1"]
    # One link at a time: the second client starts after the first ended; both servers were up before.
    assert clients[1]["start"] >= clients[0]["end"]
    assert max(run["start"] for run in servers) <= clients[0]["end"]
    recorded = json.loads(record.read_text())
    assert [test["head_device"] for test in recorded["inputs"]["tests"]] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert recorded["totals"] == {"worker": 192.62}

    # Nothing changed: nothing is measured, and the probe is the one task of the role that reaches a node.
    again = run_play(runner, NETWORK_GATE, gate, inventory)
    assert again.rc == 0, again.text
    assert len(runs()) == 4
    assert again.stats["changed"].get("localhost", 0) == 0 and again.stats["changed"].get("worker", 0) == 0
    for host in ("localhost", "worker"):
        assert role_events.node_tasks(again.events, "network_gate", host) == ["laguna.spark.network_gate_probe"], \
            (host, again.text)

    # The second twin's link degrades; measured again on demand, the gate fails naming it and forgets the record.
    (rendezvous / "slow-roceP2p1s0f1").write_text("")
    play = ("    - block:\n"
            "        - ansible.builtin.include_role:\n            name: laguna.spark.network_gate\n"
            "      rescue:\n"
            "        - ansible.builtin.debug:\n            msg: 'SLOW {{ ansible_failed_result.msg }}'\n")
    slow = run_play(runner, play, dict(gate, network_gate_remeasure=True), inventory)
    assert slow.rc == 0, slow.text
    assert "the last measurement stands, measured again (remeasure)" in slow.flat, slow.flat[-3000:]
    assert len(runs()) == 8 and [run["role"] for run in runs()[4:]].count("client") == 2
    assert "SLOW The RoCE link is too slow to serve" in slow.flat, slow.flat[-3000:]
    assert "roceP2p1s0f1 <-> worker roceP2p1s0f1: 41.27 Gb/s < 90.00 Gb/s per device" in slow.flat, \
        slow.flat[-3000:]
    assert not record.exists()
    assert not list(rendezvous.glob("listen-*")), "a server was left waiting"


def test_ctrl_c_during_the_pip_install_leaves_no_second_install(runner, tmp_path, index, cuda):
    # ansible-playbook is interrupted (SIGINT, twice as an impatient user
    # does) while pip installs from a slow index. The async install goes on
    # without it; the rerun stops it before touching the venv, installs, and
    # leaves no pip behind.
    extra = dict(venv_vars(tmp_path, index, cuda), laguna_user=getpass.getuser(),
                 laguna_sysfs_infiniband=runner.sysfs, fabric_sysfs_net=runner.sysfs_net)
    index.delay = 2.0  # for the whole test: the orphan must outlive the rerun's start
    venv = extra["laguna_venv"]
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install"]
    interrupt.interrupted_role(tmp_path, "venv", extra, pip)
    orphans = interrupt.processes(pip)
    assert orphans, "the interrupted install should still run (async), or this test tests nothing"
    again = runner.include_role("venv", extra)
    assert again.rc == 0, again.text
    assert re.search(r"Stop a pip install an interrupted run left in [^\n]*\*+\s+changed: \[localhost\]", again.text), \
        again.text
    assert not interrupt.processes(pip) and all(not os.path.exists("/proc/%d" % pid) for pid in orphans)
    third = runner.include_role("venv", extra)
    assert third.rc == 0 and third.stats["changed"].get("localhost", 0) == 0, third.text


def _fabric_env(runner, tmp_path, extravars):
    """Run the fabric_env role; its facts (fabric_env_vars, _gid_index, _start_env_script) as written to a file."""
    out = tmp_path / "fabric_env.json"
    result = runner.run(
        "    - ansible.builtin.include_role:\n        name: laguna.spark.fabric_env\n"
        "    - ansible.builtin.copy:\n        dest: %s\n        mode: '0644'\n"
        "        content: '{{ {\"vars\": fabric_env_vars, \"gid_index\": fabric_env_gid_index,"
        " \"script\": fabric_env_start_env_script} | to_json }}'\n" % out,
        dict({"laguna_model_path": "/m", "laguna_draft_path": "/d", "laguna_cuda_home": "/opt/cuda",
              "laguna_venv": "/v", "laguna_home": "/h"}, **extravars))
    assert result.rc == 0, result.text
    # One call to the node: the fabric's discovery resolves the GID index too (resolve_gid_type).
    assert role_events.node_tasks(result.events, "fabric") == ["laguna.spark.fabric_probe"], result.text
    assert role_events.node_tasks(result.events, "fabric_env") == [], result.text
    return json.loads(out.read_text())


def test_fabric_env_builds_the_services_environment_and_the_index_start_script(runner, tmp_path):
    # Both twins carry their own address: NCCL's own per-device choice is right, no index is pinned.
    # The start script is roce_gid's all the same: the raylet's unit uses it only where the index is
    # pinned (cluster_units.raylet_unit, tests/unit/test_cluster_units.py).
    facts = _fabric_env(runner, tmp_path, {"fabric_env_extra": {"NCCL_DEBUG": "INFO", "CUDA_HOME": "/other"}})
    assert facts["vars"] == {
        "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "VLLM_HOST_IP": "127.0.0.1", "CUDA_HOME": "/other", "RAY_memory_monitor_refresh_ms": "0",
        "PATH": "/v/bin:/h/.local/bin:/opt/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1", "NCCL_DEBUG": "INFO"}
    assert "NCCL_IB_GID_INDEX" not in facts["vars"]
    assert facts["gid_index"] == 3 and "NCCL_IB_GID_INDEX=" in facts["script"]
    # One twin whose address comes after an older one (molecule's worker): one index is pinned,
    # and the start script resolves it anew at each start.
    root = make_port(tmp_path / "pinned", {2: (mapped("10.0.0.7"), "RoCE v1"), 3: (mapped("10.0.0.7"), "RoCE v2"),
                                           4: (mapped("127.0.0.1"), "RoCE v1"), 5: (mapped("127.0.0.1"), "RoCE v2")})
    facts = _fabric_env(runner, tmp_path, {"laguna_sysfs_infiniband": root, "fabric_min_twins": 1})
    assert facts["vars"]["NCCL_IB_GID_INDEX"] == "5" and facts["gid_index"] == 5
    assert facts["script"] and "NCCL_IB_GID_INDEX=" in facts["script"]


def test_the_firewall_role_reads_the_cluster_from_the_inventory(runner, tmp_path):
    """firewall_cluster (the role's vars, filter firewall_cluster) from real hostvars: the host's name
    when it has no ansible_host, its RoCE address, the prefix the play gives (fabric_prefix)."""
    out = tmp_path / "cluster.json"
    result = runner.run(
        "    - ansible.builtin.include_role:\n        name: laguna.spark.firewall\n        public: true\n"
        "    - ansible.builtin.copy:\n        dest: %s\n        mode: '0644'\n"
        "        content: '{{ firewall_cluster | to_json }}'\n" % out,
        {"firewall_enabled": False, "fabric_prefix": 30, "laguna_model_path": "/m", "laguna_draft_path": "/d"})
    assert result.rc == 0, result.text
    assert json.loads(out.read_text()) == [{"name": "localhost", "addresses": ["localhost"], "roce_ip": "127.0.0.1",
                                            "roce_prefix": 30, "twin_addresses": []}]
