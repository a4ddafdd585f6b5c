"""Fault injection on the converged two-host cluster (molecule side effect).

Each test injects one fault into the running cluster the way it happens to
users, reruns the playbook as a user would (ansible-playbook with the
installed collection, the scenario's inventory), and asserts the outcome:
the cluster is back in the wanted state, or the run failed within a bounded
time with a message naming the cause and the fix. The last test reruns the
whole site playbook (changed=0) and checks that no model byte was lost.
The tests run in file order: each leaves the cluster healthy for the next.
"""

import base64
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

# The no-op timing script runs the playbooks for these tests too; tests/helpers holds the
# constants the suites share (pytest.ini puts tests/ on sys.path too).
sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "scripts"))
sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position
from helpers import constants as c  # noqa: E402  pylint: disable=wrong-import-position

EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
INVENTORY = os.path.join(EPHEMERAL, "inventory")
MEASUREMENTS = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], ".cache", "measurements")
USER, UID = c.MOLECULE_USER, c.MOLECULE_UID
HEAD, WORKER = c.MOLECULE_HEAD, c.MOLECULE_WORKER
VENV = c.MOLECULE_VENV
MODELS = c.MOLECULE_MODELS
# The scenario's secrets (molecule.yml): the API key, and where the Ray token lives.
API_KEY = c.MOLECULE_API_KEY
RAY_TOKEN_PATH = c.MOLECULE_RAY_TOKEN_PATH
FIREWALL_UNIT = c.FIREWALL_UNIT
# Module calls that reach a node in a no-op with every role's checks, per role
# (scripts/noop_ratio.py's full_node_calls; a role not named: 1, its probe).
NODE_CALLS = {
    "preflight": 2,    # its probe; on the head the page-cache drop, which runs whenever pages are cached
    "ssh_mesh": 2,     # this node's keys, then the peers (which need every node's keys)
    "fabric": 3,       # its probe, and its discovery again where network_gate and fabric_env include it
    "vllm_serve": 3,   # the raylets' probe (a loop on the head, one call per node), the head's probe
    "monitoring": 2,   # every node's probe; on the head Prometheus's files (they name every node's devices)
}
RAY_CLIENT = "RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=%s" % RAY_TOKEN_PATH


def podman(host, *cmd, user=None, check=True, timeout=60):
    argv = ["podman", "exec"]
    if user:
        argv += ["-u", user, "-e", "XDG_RUNTIME_DIR=/run/user/%d" % UID]
    proc = subprocess.run(argv + [host] + list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s on %s: rc=%d %s" % (cmd, host, proc.returncode, proc.stderr))
    return proc.stdout.strip()


def unit(host, name, *props):
    out = podman(host, "systemctl", "--user", "show", name + ".service",
                 *("--property=" + p for p in props), user=USER)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def play(*args, playbook="laguna.spark.site", timeout=900):
    """Run a playbook of the installed collection; (rc, {host: changed}, output on one line, seconds)."""
    rc, changed, out, seconds = noop_ratio.play(INVENTORY, playbook, *args, timeout=timeout)
    return rc, changed, " ".join(out.split()), seconds


def api(path, body=None):
    script = ("import json, sys, urllib.request\n"
              "body = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None\n"
              "req = urllib.request.Request('http://127.0.0.1:%d' + sys.argv[1]," % c.API_PORT +
              " data=json.dumps(body).encode() if body else None, headers={'Content-Type': 'application/json',"
              " 'Authorization': 'Bearer %s'})\n" % API_KEY +
              "print(urllib.request.urlopen(req, timeout=30).read().decode())\n")
    args = [path] + ([json.dumps(body)] if body else [])
    return podman(HEAD, "python3", "-c", script, *args)


def vllm_pid():
    return unit(HEAD, "laguna-vllm", "MainPID")["MainPID"]


def healthy():
    props = unit(HEAD, "laguna-vllm", "ActiveState")
    models = json.loads(api("/v1/models"))
    return props["ActiveState"] == "active" and [m["id"] for m in models["data"]] == [c.SERVED_MODEL]


def model_digests():
    return {host: podman(host, "bash", "-c", "cd %s && find . -type f ! -path '*/.cache/*' | sort | xargs sha256sum"
                         % MODELS) for host in (HEAD, WORKER)}


@pytest.fixture(scope="module")
def digests_before():
    return model_digests()


def test_the_cluster_starts_healthy(digests_before):
    assert healthy()
    assert digests_before[HEAD] and digests_before[HEAD] == digests_before[WORKER]


def test_a_killed_vllm_is_started_again():
    podman(HEAD, "systemctl", "--user", "kill", "--signal=SIGKILL", "laguna-vllm.service", user=USER)
    rc, changed, out, _seconds = play("--tags", "vllm_serve")
    assert rc == 0, out[-3000:]
    assert changed[HEAD] >= 1 and healthy()


def test_a_hung_vllm_is_found_within_the_bound_and_restarted():
    before = vllm_pid()
    podman(HEAD, "kill", "-STOP", before)
    rc, changed, out, seconds = play("--tags", "vllm_serve", "-e", "vllm_serve_health_timeout=5")
    assert rc == 0, out[-3000:]
    assert vllm_pid() != before and healthy()
    assert seconds < 300, "found and restarted in %.0f s" % seconds


def test_a_killed_head_raylet_restarts_the_cluster_and_vllm():
    before = vllm_pid()
    podman(HEAD, "systemctl", "--user", "kill", "--signal=SIGKILL", "laguna-ray-head.service", user=USER)
    rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve")
    assert rc == 0, out[-3000:]
    # A new head is a new cluster: the worker joins it afresh, vLLM restarts on it.
    assert unit(HEAD, "laguna-ray-head", "ActiveState")["ActiveState"] == "active"
    assert unit(WORKER, "laguna-ray-worker", "ActiveState")["ActiveState"] == "active"
    assert changed[WORKER] >= 1 and vllm_pid() != before and healthy()


def test_a_changed_worker_gid_index_restarts_every_service_that_captured_it():
    types = "/opt/laguna-standin/sys/class/infiniband/rocep1s0f1/ports/1"
    gids = podman(WORKER, "bash", "-c", "grep -l ffff:0a59:4d0c %s/gids/*" % types).split()
    old = [os.path.basename(g) for g in gids]
    new = "7"
    mapped = podman(WORKER, "cat", gids[0])
    # The address moves to slot 7 (a RoCE v2 GID there), as after an address change.
    podman(WORKER, "bash", "-c",
           "for i in %s; do echo 0000:0000:0000:0000:0000:0000:0000:0000 > %s/gids/$i; done; "
           "echo %s > %s/gids/%s; echo 'RoCE v2' > %s/gid_attrs/types/%s; echo enp1s0f1np1 > %s/gid_attrs/ndevs/%s"
           % (" ".join(old), types, mapped, types, new, types, new, types, new))
    before_worker = unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"]
    before_vllm = vllm_pid()
    rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve")
    assert rc == 0, out[-3000:]
    env = unit(WORKER, "laguna-ray-worker", "Environment")["Environment"]
    assert "NCCL_IB_GID_INDEX=7" in env.split() or "NCCL_IB_ADDR_RANGE" in env
    assert unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"] != before_worker
    assert vllm_pid() != before_vllm and healthy()
    rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve")
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]


def test_a_stray_vllm_serve_beside_the_unit_is_stopped_and_the_unit_is_not():
    unit_pid = vllm_pid()
    podman(HEAD, "bash", "-c", "nohup -- bash -c 'exec -a \"vllm serve /models/manual\" sleep 600' "
                               ">/dev/null 2>&1 &", user=USER)
    time.sleep(1)
    assert podman(HEAD, "pgrep", "-f", "vllm serve /models/manual", check=False)
    rc, changed, out, _seconds = play("--tags", "preflight")
    assert rc == 0, out[-3000:]
    assert not podman(HEAD, "pgrep", "-f", "vllm serve /models/manual", check=False)
    assert vllm_pid() == unit_pid and healthy()


def test_a_peer_whose_host_key_changed_is_refused_until_accepted():
    """The worker's sshd keys regenerated: ssh_mesh on the head refuses to pin the new ones, naming
    the worker, its RoCE address, the pinned and the new fingerprint and both fixes, and leaves
    known_hosts alone; only ssh_mesh_accept_changed_host_keys replaces them."""
    known_hosts, roce = "/home/spark/.ssh/known_hosts", "10.89.77.12"
    found = podman(HEAD, "ssh-keygen", "-F", roce, "-f", known_hosts, user=USER)
    (pinned,) = [line for line in found.splitlines()
                 if not line.startswith("#") and line.split()[1:2] == ["ssh-ed25519"]]
    blob = base64.b64decode(pinned.split()[2])
    old = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    before = podman(HEAD, "cat", known_hosts, user=USER)
    podman(WORKER, "bash", "-c", "rm -f /etc/ssh/ssh_host_*; ssh-keygen -A; systemctl restart ssh || systemctl restart sshd")
    new = podman(WORKER, "ssh-keygen", "-lf", "/etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    assert new.startswith("SHA256:") and new != old

    rc, _changed, out, _seconds = play("--tags", "ssh_mesh")
    assert rc != 0, out[-3000:]
    for part in (WORKER, roce, old, new, "ssh-keygen -R", "ssh_mesh_accept_changed_host_keys"):
        assert part in out, (part, out[-3000:])
    assert podman(HEAD, "cat", known_hosts, user=USER) == before

    rc, changed, out, _seconds = play("--tags", "ssh_mesh", "-e", "ssh_mesh_accept_changed_host_keys=true")
    assert rc == 0 and changed[HEAD] >= 1, out[-3000:]
    rc, changed, out, _seconds = play("--tags", "ssh_mesh")
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
    podman(HEAD, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", roce, "true", user=USER)


def test_a_port_held_by_another_program_or_a_gpu_held_by_another_ray_job_is_refused_before_vllm_starts():
    """Two refusals with vLLM stopped, judged one after the other, and one start after both."""
    podman(HEAD, "systemctl", "--user", "stop", "laguna-vllm.service", user=USER)
    # The API port held by another program, root's (the role's probe reads as the service user, who
    # cannot read root's processes: the listener must still count): the run fails fast, naming it.
    podman(HEAD, "bash", "-c", "nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
    try:
        time.sleep(1)
        rc, _changed, out, seconds = play("--tags", "vllm_serve")
        assert rc != 0
        assert "Port 8000 is held by" in out and "http.server" in out
        assert seconds < 240
    finally:
        podman(HEAD, "pkill", "-f", "http.server 8000", check=False)
    # A GPU held by another Ray job: refused before vLLM would wait forever for it.
    holder = ("import ray, time\n"
              "ray.init(address='10.89.77.11:6379')\n"
              "@ray.remote(num_gpus=1)\n"
              "class Holder:\n"
              "    def ping(self):\n"
              "        return 1\n"
              "h = Holder.remote()\n"
              "ray.get(h.ping.remote())\n"
              "open('/tmp/holder.ready', 'w').close()\n"
              "time.sleep(600)\n")
    podman(HEAD, "bash", "-c", "rm -f /tmp/holder.ready; %s nohup %s/bin/python -c %s >/tmp/holder.log 2>&1 &"
           % (RAY_CLIENT, VENV, shlex.quote(holder)), user=USER)
    try:
        for _attempt in range(60):
            if subprocess.run(["podman", "exec", HEAD, "test", "-e", "/tmp/holder.ready"],
                              check=False).returncode == 0:
                break
            time.sleep(2)
        else:
            raise AssertionError(podman(HEAD, "cat", "/tmp/holder.log", check=False))
        rc, _changed, out, _seconds = play("--tags", "vllm_serve")
        assert rc != 0
        assert "needs 2 free GPU(s)" in out and "Another Ray job holds GPUs" in out
    finally:
        podman(HEAD, "pkill", "-f", "class Holder", check=False)
    time.sleep(3)
    rc, _changed, out, _seconds = play("--tags", "vllm_serve")
    assert rc == 0 and healthy(), out[-3000:]


def test_a_gpu_held_by_a_process_outside_ray_is_refused_naming_it():
    """Ray does not see it; nvidia-smi does (its stand-in: a flock on the device file)."""
    before = vllm_pid()
    holder = ("import fcntl, time; f = open('/opt/laguna-standin/dev/nvidia0'); fcntl.flock(f, fcntl.LOCK_SH); "
              "time.sleep(600)")
    pid = podman(WORKER, "bash", "-c", "nohup python3 -c %s >/dev/null 2>&1 & echo $!" % shlex.quote(holder),
                 user=USER)
    try:
        time.sleep(1)
        # A complete run: the fast path sees the new holder, vllm_serve refuses it.
        rc, _changed, out, seconds = play()
        assert rc != 0, out[-3000:]
        assert "The GPU of laguna-worker is held by PID %s (python3 -c import fcntl, time;" % pid in out, out[-3000:]
        assert "kill %s" % pid in out and "vllm_serve_foreign_gpu_processes: warn" in out
        # the stand-in vLLM's TP ranks hold the GPU from the raylets' units: not foreign
        assert "name: ray::RayWorkerProc.run owned: true" in out and "unit: laguna-ray-worker.service" in out, out
        assert vllm_pid() == before and seconds < 300
        rc, _changed, out, _seconds = play(playbook="laguna.spark.verify")
        assert rc != 0 and "The GPU of laguna-worker is held by PID %s" % pid in out, out[-3000:]
    finally:
        podman(WORKER, "kill", pid, check=False)
    rc, changed, out, _seconds = play("--tags", "vllm_serve")
    assert rc == 0 and healthy(), out[-3000:]
    assert changed[HEAD] == 0 and vllm_pid() == before


def test_out_of_range_values_are_refused_before_anything_restarts():
    before = vllm_pid()
    rc, _changed, out, seconds = play("-e", "vllm_serve_num_speculative_tokens=0",
                                      "-e", "vllm_serve_kv_cache_memory_bytes=-1")
    assert rc != 0
    assert "vllm_serve_num_speculative_tokens" in out and "vllm_serve_kv_cache_memory_bytes" in out
    assert vllm_pid() == before and seconds < 240


def test_a_smaller_deployment_than_the_running_one_is_refused():
    before = vllm_pid()
    rc, _changed, out, _seconds = play("--tags", "vllm_serve", "-e", "laguna_worker_group=no_such_group")
    assert rc != 0
    assert "laguna_allow_shrink" in out
    assert vllm_pid() == before


GIDS = "/opt/laguna-standin/sys/class/infiniband/rocep1s0f1/ports/1"


def move_gid(host, address_hex, new):
    """Move the RoCE v2 GID of the address (its last two groups, e.g.
    0a59:4d0c) to slot ``new``, as after an address change or a reboot."""
    gids = podman(host, "bash", "-c", "grep -l ffff:%s %s/gids/*" % (address_hex, GIDS)).split()
    mapped = podman(host, "cat", gids[0])
    podman(host, "bash", "-c",
           "for g in %s; do echo 0000:0000:0000:0000:0000:0000:0000:0000 > $g; done; "
           "echo %s > %s/gids/%s; echo 'RoCE v2' > %s/gid_attrs/types/%s; echo enp1s0f1np1 > %s/gid_attrs/ndevs/%s"
           % (" ".join(gids), mapped, GIDS, new, GIDS, new, GIDS, new))


def rank_environ(host, rank):
    """The environment vLLM's TP rank ``rank`` started with on ``host`` (the
    stand-in's rank-<rank>.json, written by the rank's actor process)."""
    record = json.loads(podman(host, "cat", "/tmp/laguna-standin-vllm/rank-%d.json" % rank, user=USER))
    assert record["rank"] == rank, record
    return record["environ"]


def process_environ(host, pid):
    return dict(item.split("=", 1) for item in
                podman(host, "cat", "/proc/%s/environ" % pid, user=USER).split("\0") if "=" in item)


def head_only_inventory(**host_vars):
    """An inventory file that sets ``host_vars`` on the head alone (given
    with -i after the scenario's, its values win there)."""
    path = os.path.join(EPHEMERAL, "head-only.yml")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"all": {"hosts": {HEAD: host_vars}}}, handle)
    return path


def restart_nodes():
    """Restart both node containers (a power cut) and wait for their systemd."""
    subprocess.run(["podman", "restart", "--time", "0", HEAD, WORKER], check=True, capture_output=True, timeout=240)
    for _attempt in range(90):
        states = [podman(h, "systemctl", "is-system-running", check=False) for h in (HEAD, WORKER)]
        if all(state in ("running", "degraded") for state in states):
            return
        time.sleep(2)
    raise AssertionError("the nodes did not boot: %s" % states)


def test_a_changed_head_gid_index_restarts_every_service_that_captured_it_and_verify_names_unwanted_settings():
    """Two faults that share the last restart: the head's GID index moves
    (pinned policy), then the run back to the default policy also starts vLLM
    with settings the inventory does not want, which verify must name."""
    # By default the head leaves the index to NCCL's own per-device choice
    # (nothing captures it); pinned, the head raylet carries it. Only the
    # head is pinned: the worker keeps the default, so the two nodes resolve
    # different policies and the index must not reach the worker's rank.
    pinned = ("-i", head_only_inventory(fabric_gid_policy="pinned"))
    rc, _changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *pinned)
    assert rc == 0 and healthy(), out[-3000:]
    assert "NCCL_IB_GID_INDEX=3" in unit(HEAD, "laguna-ray-head", "Environment")["Environment"].split()
    before = {name: unit(HEAD, name, "MainPID")["MainPID"] for name in ("laguna-ray-head", "laguna-vllm")}
    move_gid(HEAD, "0a59:4d0b", 7)
    rc, _changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *pinned)
    assert rc == 0, out[-3000:]
    assert "NCCL_IB_GID_INDEX=7" in unit(HEAD, "laguna-ray-head", "Environment")["Environment"].split()
    # vLLM's unit carries no node's index: vLLM gives its Ray workers each
    # variable of its own environment that their raylet does not set, so the
    # ranks keep their own raylet's. It restarts with the new head all the same.
    assert not [v for v in unit(HEAD, "laguna-vllm", "Environment")["Environment"].split()
                if v.startswith("NCCL_IB_GID_INDEX=")]
    for name, pid in before.items():
        assert unit(HEAD, name, "MainPID")["MainPID"] != pid, name
    assert healthy()
    # Each TP rank started with its own node's fabric settings: vLLM fills a
    # rank's environment from its own (setdefault), so whatever the head set
    # there would reach the worker's rank too.
    assert rank_environ(HEAD, 0)["NCCL_IB_GID_INDEX"] == "7"
    # The worker's rank has its raylet's values (its own policy pins its own
    # index, which the worker GID test above moved to 7 as well).
    worker_rank = rank_environ(WORKER, 1)
    raylet = process_environ(WORKER, unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"])
    fabric = {k: v for k, v in raylet.items() if k.startswith(("NCCL_", "GLOO_", "VLLM_HOST_IP"))}
    assert fabric and {k: worker_rank.get(k) for k in fabric} == fabric, (fabric, worker_rank)
    rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *pinned)
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
    # Back to the default policy (the raylets and vLLM restart), with two
    # vLLM settings the inventory does not want.
    rc, _changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", "-e", "vllm_serve_max_num_seqs=1",
                                       "-e", "vllm_serve_memory_max=11G")
    assert rc == 0 and healthy(), out[-3000:]
    # verify names each setting of the running unit that the inventory does not want.
    rc, _changed, out, _seconds = play(playbook="laguna.spark.verify")
    assert rc != 0
    assert ('laguna-vllm.service on laguna-head: command argument argv[17] is "1", the inventory wants "2": '
            'rerun --tags vllm_serve.') in out, out[-3000:]
    assert 'property MemoryMax is "11811160064" (11G), the inventory wants "12G"' in out
    rc, _changed, out, _seconds = play("--tags", "vllm_serve")
    assert rc == 0 and healthy(), out[-3000:]
    rc, _changed, out, _seconds = play(playbook="laguna.spark.verify")
    assert rc == 0, out[-3000:]


def test_node_restarts_transient_units_are_gone_and_named_persistent_units_come_back_resolving_the_gid_index_anew():
    """Two restarts of both nodes: with the recipe's transient units, verify
    says they are gone and how to bring them back, and the run that brings
    them back makes them persistent; with persistent units, the second
    restart brings everything back by itself, the worker's GID resolved anew."""
    restart_nodes()
    rc, _changed, out, seconds = play(playbook="laguna.spark.verify")
    assert rc != 0 and seconds < 300
    assert "laguna-ray-head on laguna-head, laguna-ray-worker on laguna-worker: gone (not loaded)" in out, out[-3000:]
    assert "Bring them back with `ansible-playbook site.yml --tags ray_cluster,vllm_serve`" in out
    assert "laguna_persistent_units: true" in out
    persistent = ("-e", '{"laguna_persistent_units": true}')
    rc, _changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *persistent)
    assert rc == 0 and healthy(), out[-3000:]
    for host, name in ((HEAD, "laguna-ray-head"), (WORKER, "laguna-ray-worker"), (HEAD, "laguna-vllm")):
        props = unit(host, name, "UnitFileState", "FragmentPath")
        assert props == {"UnitFileState": "enabled",
                         "FragmentPath": "/home/spark/.config/systemd/user/%s.service" % name}, props
    # The reboot renumbers the worker's GID table: its address moves to slot 6.
    move_gid(WORKER, "0a59:4d0c", 6)
    restart_nodes()
    for _attempt in range(90):
        try:
            if healthy():
                break
        except AssertionError:
            pass
        time.sleep(2)
    else:
        raise AssertionError("vLLM did not come back within 180 s of the restart")
    assert podman(WORKER, "cat", "/run/user/%d/laguna-spark/laguna-ray-worker.env" % UID) == "NCCL_IB_GID_INDEX=6"
    raylet = unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"]
    assert "NCCL_IB_GID_INDEX=6" in podman(WORKER, "cat", "/proc/%s/environ" % raylet, user=USER).split("\0")
    rc, _changed, out, _seconds = play(*persistent, playbook="laguna.spark.verify")
    assert rc == 0, out[-3000:]
    # A crash of the worker's raylet, no run: systemd starts it again; vLLM's
    # rank there died with it, so vLLM exits (status 0, as vLLM 0.25.1 does)
    # and its Restart=always starts it again, to serve once the worker is back.
    for host, name in ((HEAD, "laguna-vllm"), (WORKER, "laguna-ray-worker")):
        text = podman(host, "cat", "/home/spark/.config/systemd/user/%s.service" % name, user=USER)
        assert "Restart=always" in text.splitlines(), text
    before = {(host, name): unit(host, name, "MainPID", "NRestarts")
              for host, name in ((HEAD, "laguna-vllm"), (WORKER, "laguna-ray-worker"))}
    podman(WORKER, "systemctl", "--user", "kill", "--signal=SIGKILL", "laguna-ray-worker.service", user=USER)
    deadline = time.monotonic() + 240
    while True:
        now = {key: unit(key[0], key[1], "MainPID", "NRestarts", "ActiveState") for key in before}
        restarted = all(now[key]["MainPID"] not in (before[key]["MainPID"], "0")
                        and int(now[key]["NRestarts"]) > int(before[key]["NRestarts"])
                        and now[key]["ActiveState"] == "active" for key in before)
        try:
            if restarted and healthy():
                break
        except AssertionError:
            pass
        if time.monotonic() >= deadline:  # say what vLLM was doing, for the next look at this bound
            tail = podman(HEAD, "journalctl", "--no-pager", "--output=cat", "-n", "40",
                          "_SYSTEMD_USER_UNIT=laguna-vllm.service", "_UID=%d" % UID)
            raise AssertionError("not back within 240 s of the raylet's crash: %s; vLLM's journal:\n%s" % (now, tail))
        time.sleep(3)
    journal = podman(HEAD, "journalctl", "--no-pager", "--output=cat", "_SYSTEMD_USER_UNIT=laguna-vllm.service",
                     "_UID=%d" % UID)
    assert "RayWorkerProc rank=[1] died unexpectedly, shutting down executor." in journal, journal[-3000:]
    rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *persistent)
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
    # The units stay persistent: the token rotation, next, brings back the
    # recipe's transient units in the restart it makes anyway.


def changed_tasks(out):
    """{(task, host)} of every task a playbook run reports as changed."""
    found, task = set(), None
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):line.index("]")]
        elif line.startswith("changed: [") and task:
            found.add((task, line[len("changed: ["):].split("]")[0].split(" ")[0]))
    return found


def token_digest(host):
    return podman(host, "sha256sum", RAY_TOKEN_PATH, user=USER).split()[0]


ROTATION = {("laguna.spark.ray_cluster : Make the cluster's Ray token on the head (once; a new generation rotates it)",
             HEAD),
            ("laguna.spark.ray_cluster : Install the token on the other nodes (mode 0600)", WORKER),
            ("laguna.spark.ray_cluster : Run the head raylet", HEAD),
            ("laguna.spark.ray_cluster : Run the worker raylets", WORKER),
            ("laguna.spark.vllm_serve : Run vllm serve", HEAD)}


def test_rotating_the_ray_token_restarts_the_raylets_and_vllm_once_and_nothing_else():
    """A new token generation, then back to the inventory's: each complete run
    restarts the raylets and vLLM once, and changes nothing else. The first
    starts from the persistent units the node-restart test leaves and, as the
    inventory has none, brings back the recipe's transient units in that same
    restart: their unit files go."""
    units = ((HEAD, "laguna-ray-head"), (WORKER, "laguna-ray-worker"), (HEAD, "laguna-vllm"))
    unit_files = "/home/spark/.config/systemd/user"

    def invocations():
        return [unit(host, name, "InvocationID")["InvocationID"] for host, name in units]

    for generation in ("2", None):  # a new generation, then back to the inventory's
        before, digest = invocations(), token_digest(HEAD)
        extra = ["-e", "laguna_ray_auth_token_generation=" + generation] if generation else []
        rc, _changed, out, _seconds = noop_ratio.play(INVENTORY, "laguna.spark.site", *extra, timeout=900)
        assert rc == 0, out[-3000:]
        changed = {(task, host) for task, host in changed_tasks(out)
                   if not task.startswith("Record what this complete run left")}
        assert changed == ROTATION, sorted(changed ^ ROTATION)
        after = invocations()
        assert all(a != b for a, b in zip(before, after)), (before, after)
        assert token_digest(HEAD) == token_digest(WORKER) != digest
        assert healthy()
        assert [podman(host, "bash", "-c", "ls -A %s 2>/dev/null; true" % unit_files, user=USER)
                for host in (HEAD, WORKER)] == ["", ""]
        if generation:
            # The same generation again: nothing changes, with every role's checks.
            rc, changed, out, _seconds = play("--tags", "ray_cluster,vllm_serve", *extra)
            assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
            assert invocations() == after


TARGET = MODELS + "/Laguna-S-2.1-FP8"


def shard(i):
    return "model-%05d-of-00024.safetensors" % i


def mirror_pids(host):
    """PIDs of the mirror's rsync processes on ``host``: the senders on the
    head (--partial-dir=..., one word), the receivers they start on a worker
    over ssh (rsync --server, to which rsync passes it as two words)."""
    pattern = ("^\\S*rsync .* --partial-dir=.cache/laguna-rsync-partial " if host == HEAD
               else "^\\S*rsync --server .* --partial-dir .cache/laguna-rsync-partial ")
    out = podman(host, "pgrep", "-f", pattern, check=False)
    return sorted(int(p) for p in out.split())


def test_ctrl_c_over_ssh_mid_mirror_is_stopped_by_the_rerun_before_it_verifies_or_sends():
    """SIGINT (twice) to ansible-playbook, over SSH, while the mirror's rsync
    streams send: they go on sending (the mirror is async); the rerun stops
    them first and ends with identical copies, sending nothing twice."""
    before = model_digests()
    podman(WORKER, "bash", "-c", "rm -f %s/model-0001[0-5]-of-00024.safetensors" % TARGET, user=USER)
    kept = {name: podman(WORKER, "stat", "-c", "%i", "%s/%s" % (TARGET, name))
            for name in (shard(1), shard(2), shard(20))}
    log_path = os.path.join(EPHEMERAL, "ctrl-c-mirror.log")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", INVENTORY,
            os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "site.yml"), "--tags", "staging",
            "-e", '{"staging_rsync_options": ["--archive", "--bwlimit=16"], "staging_mirror_streams": 2}']
    with open(log_path, "w", encoding="utf-8") as log:
        run = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
        try:
            for _attempt in range(600):
                if mirror_pids(HEAD):
                    break
                assert run.poll() is None, open(log_path, encoding="utf-8").read()[-3000:]
                time.sleep(0.2)
            time.sleep(3)
            run.send_signal(signal.SIGINT)
            time.sleep(1)
            run.send_signal(signal.SIGINT)
            assert run.wait(120) != 0
        finally:
            if run.poll() is None:
                run.kill()
    senders, receivers = mirror_pids(HEAD), mirror_pids(WORKER)
    assert senders and receivers, "the interrupted mirror should still send (async), or this test tests nothing"

    rc, changed, out, _seconds = play("--tags", "staging")
    assert rc == 0, out[-3000:]
    said = "laguna-worker: target: stopped the mirror an interrupted run left running: senders pid %s on laguna-head" \
        % ", ".join(str(p) for p in senders)
    assert said in out, out[-3000:]
    assert out.index(said) < out.index("TASK [laguna.spark.staging : Verify against the head's sha256s the worker's target]")
    # The receivers end with their senders (their ssh closes), or the rerun stops them itself.
    assert not [p for p in mirror_pids(WORKER) if p in receivers]
    assert changed[WORKER] >= 1
    for host in (HEAD, WORKER):
        assert not podman(host, "pgrep", "-af", "[r]sync |[s]sh -c aes128-gcm", check=False), host
    assert podman(WORKER, "bash", "-c", "find %s -path '*/.cache/laguna-rsync-*' -type f" % TARGET) == ""
    assert model_digests() == before
    for name, inode in kept.items():  # complete before: never sent again
        assert podman(WORKER, "stat", "-c", "%i", "%s/%s" % (TARGET, name)) == inode, name
    rc, changed, out, _seconds = play("--tags", "staging")
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]


def test_a_file_the_hubs_list_does_not_name_is_named_and_refused_only_when_vllm_would_read_it():
    """A note in the head's checkpoint is named and left alone (the worker
    never gets it); a stray shard copy beside it is refused with its path
    before anything is mirrored, by staging and by verify; without the copy,
    the note stays named and a rerun changes nothing."""
    before = model_digests()
    vllm = vllm_pid()
    podman(HEAD, "bash", "-c", "echo 'my notes' > %s/notes.txt" % TARGET, user=USER)
    try:
        rc, _changed, out, _seconds = play("--tags", "staging")
        assert rc == 0, out[-3000:]
        assert ("1 file(s) that the checkpoint's file list does not name, left alone (neither compared nor "
                "mirrored): notes.txt") in out, out[-3000:]
        assert "1 file(s) outside its file list, left alone: notes.txt" in out
        assert "differs from laguna-head's copy" not in out
        assert subprocess.run(["podman", "exec", WORKER, "test", "-e", TARGET + "/notes.txt"],
                              check=False).returncode == 1

        podman(HEAD, "cp", "-p", "%s/%s" % (TARGET, shard(1)), "%s/model-00025-of-00024.safetensors" % TARGET,
               user=USER)
        rc, _changed, out, _seconds = play("--tags", "staging")
        assert rc != 0
        assert ("1 file(s) that the checkpoint's file list does not name would be read as part of the model: "
                "model-00025-of-00024.safetensors (a shard's name); move them out from %s (or delete them), "
                "then rerun; nothing was mirrored" % TARGET) in out, out[-3000:]
        assert subprocess.run(["podman", "exec", WORKER, "test", "-e",
                               TARGET + "/model-00025-of-00024.safetensors"], check=False).returncode == 1
        rc, _changed, out, _seconds = play(playbook="laguna.spark.verify")
        assert rc != 0 and "model-00025-of-00024.safetensors (a shard's name)" in out, out[-3000:]
        # vllm_serve judges what its probe scans as staging does, and refuses before it acts.
        rc, _changed, out, _seconds = play("--tags", "vllm_serve")
        assert rc != 0 and "model-00025-of-00024.safetensors (a shard's name)" in out, out[-3000:]
        assert "Run --tags staging." in out, out[-3000:]
        assert vllm_pid() == vllm

        podman(HEAD, "rm", "-f", TARGET + "/model-00025-of-00024.safetensors")
        rc, changed, out, _seconds = play("--tags", "staging")
        assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
        assert "1 file(s) outside its file list, left alone: notes.txt" in out
    finally:
        podman(HEAD, "rm", "-f", TARGET + "/notes.txt", TARGET + "/model-00025-of-00024.safetensors")
    assert model_digests() == before and healthy()


def test_a_worker_without_a_roce_v2_gid_stops_the_head_in_one_sentence_naming_it():
    """The worker's address has no RoCE v2 GID any more (every slot of it
    typed RoCE v1): a complete run fails on the worker in its fabric
    discovery, and the head stops in network_gate with one sentence naming
    the worker, never an internal error; nothing restarts."""
    vllm = vllm_pid()
    slots = podman(WORKER, "bash", "-c", "grep -l ffff:0a59:4d0c %s/gids/*" % GIDS).split()
    types = {os.path.basename(g): podman(WORKER, "cat", "%s/gid_attrs/types/%s" % (GIDS, os.path.basename(g)))
             for g in slots}
    assert "RoCE v2" in types.values()
    podman(WORKER, "bash", "-c", "for i in %s; do echo 'IB/RoCE v1' > %s/gid_attrs/types/$i; done"
           % (" ".join(types), GIDS))
    try:
        rc, _changed, out, seconds = play()
        assert rc != 0
        assert "No GID policy" in out and "laguna-worker" in out, out[-3000:]
        assert ("laguna-worker failed earlier in this run (its error is above), so network_gate on laguna-head "
                "stops here (it needs laguna-worker's fabric_facts): fix what failed on laguna-worker and rerun."
                ) in out, out[-3000:]
        assert "list index out of range" not in out and "HostVarsVars" not in out
        assert vllm_pid() == vllm and seconds < 300
    finally:
        podman(WORKER, "bash", "-c", "; ".join("echo '%s' > %s/gid_attrs/types/%s" % (t, GIDS, i)
                                               for i, t in types.items()))
    rc, _changed, out, _seconds = play("--tags", "fabric,network_gate")
    assert rc == 0 and healthy(), out[-3000:]
    assert vllm_pid() == vllm


WEDGE = c.MOLECULE_WEDGE_FILE


def test_a_vllm_that_lists_its_model_but_finishes_no_request_is_not_skipped_and_is_restarted():
    """vLLM's engine wedged (as in a collective that never returns): /health
    and /v1/models answer, no completion finishes, no token is generated;
    only the smoke test tells. A complete run's fast no-op path names it (it
    names every difference it finds), the vllm_serve role's hang check (the
    same smoke test, within vllm_serve_health_timeout) restarts vLLM and
    nothing else, and the next complete run ends on the fast path."""
    before = vllm_pid()
    podman(HEAD, "bash", "-c", "echo %s > %s" % (before, WEDGE))
    try:
        assert healthy()  # it lists its model
        rc, _changed, raw, _seconds = noop_ratio.play(INVENTORY, "laguna.spark.site", timeout=900)
    finally:
        podman(HEAD, "rm", "-f", WEDGE)
    out = " ".join(raw.split())
    assert rc == 0, out[-3000:]
    wedged = "got no answer within %d s; vLLM generated no token meanwhile: its engine is wedged"
    assert wedged % 5 in out, out[:3000]  # the fast path's (laguna_fast_url_timeout)
    assert "is hung: The smoke test" in out and wedged % c.MOLECULE_HEALTH_TIMEOUT in out, out[-3000:]
    assert changed_tasks(raw) == {("laguna.spark.vllm_serve : Run vllm serve", HEAD)}, out[-3000:]
    assert vllm_pid() != before and healthy()
    rc, changed, out, _seconds = play()
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
    assert "TASK [laguna.spark.preflight" not in out, out[-3000:]  # it ended on the fast path


def ray_alive_hosts():
    """The host names Ray's dashboard on the head lists as alive, read as the fast path reads them."""
    script = ("import json, urllib.request\n"
              "token = open('%s').read().strip()\n"
              "req = urllib.request.Request('http://127.0.0.1:8265/nodes?view=hostNameList',"
              " headers={'Authorization': 'Bearer ' + token})\n"
              "print(json.dumps(sorted(json.loads(urllib.request.urlopen(req, timeout=10).read())"
              "['data']['hostNameList'])))\n" % RAY_TOKEN_PATH)
    return json.loads(podman(HEAD, "python3", "-c", script, user=USER))


# Beside the Hub double's repo: moves its main to a new commit with the same files (tests/doubles/hub/hub.py).
HUB_TARGET = "/opt/laguna-standin/hub/repos/poolside/Laguna-S-2.1-FP8"


def test_a_complete_run_does_not_skip_a_frozen_raylet_a_touched_shard_or_a_moved_hub_branch_and_repairs_all():
    """Four faults judged after one complete run: every process of the worker's
    raylet unit stopped (SIGSTOP: systemd still calls the unit active and its
    PIDs stay, while Ray drops the node; vLLM 0.25.1, as the stand-in, then
    loses its rank there, shuts down and exits with status 0, and its
    transient unit goes), a shard rewritten in place on the worker (same
    size and mtime), and the Hub's main of the target moved to a new commit
    (same files: the Hub double's .commit file), and the worker's firewall
    unit disabled by hand (it would not load Ray's table after a reboot).
    Check mode runs the roles and names what a real run would change,
    changing nothing; the fast no-op path must see what the roles would (the
    stopped processes, the nodes Ray lists, vLLM's unit, the file's ctime,
    the commit the staging role verifies against, the unit's wants link), and
    one complete run repairs all four. main stays on the new commit."""
    rc, changed, out, _seconds = play()
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, out[-3000:]
    before, raylet = vllm_pid(), unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"]
    podman(HEAD, "bash", "-c", "echo moved-1 > %s.commit" % HUB_TARGET)
    shard = "$(ls %s/Laguna-S-2.1-FP8/*.safetensors | head -1)" % MODELS
    podman(WORKER, "bash", "-c", "f=%s; touch -r $f /tmp/ref; cp -p $f /tmp/shard && cat /tmp/shard > $f && "
                                 "touch -r /tmp/ref $f && rm /tmp/shard" % shard)
    shard_ctime = podman(WORKER, "bash", "-c", "stat -c %%Z %s" % shard)
    podman(WORKER, "systemctl", "disable", FIREWALL_UNIT)
    podman(WORKER, "systemctl", "--user", "kill", "--signal=SIGSTOP", "laguna-ray-worker.service", user=USER)
    try:
        for _attempt in range(90):
            if unit(HEAD, "laguna-vllm", "LoadState")["LoadState"] == "not-found":
                break
            time.sleep(2)
        else:
            raise AssertionError("vLLM still runs 180 s after its worker rank froze: %s"
                                 % unit(HEAD, "laguna-vllm", "ActiveState"))
        assert unit(WORKER, "laguna-ray-worker", "ActiveState")["ActiveState"] == "active"
        rc, _changed, dry, _seconds = noop_ratio.play(INVENTORY, "laguna.spark.site", "--check", "--diff", timeout=900)
        assert rc == 0, dry[-3000:]
        assert "Is every node as the last complete run left it?" not in dry, dry[-3000:]
        assert changed_tasks(dry) == {("laguna.spark.ray_cluster : Run the worker raylets", WORKER),
                                      ("laguna.spark.vllm_serve : Run vllm serve", HEAD),
                                      ("laguna.spark.firewall : Load the nftables table of Ray's ports", WORKER)}, \
            dry[-3000:]
        assert podman(WORKER, "systemctl", "is-enabled", FIREWALL_UNIT, check=False) == "disabled"
        assert unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"] == raylet
        assert unit(HEAD, "laguna-vllm", "LoadState")["LoadState"] == "not-found"
        assert podman(WORKER, "bash", "-c", "stat -c %%Z %s" % shard) == shard_ctime
        # Ray's dashboard drops the node some seconds after its actors die: wait (bounded) until it has.
        for _attempt in range(60):
            if ray_alive_hosts() == ["laguna-head"]:
                break
            time.sleep(2)
        else:
            raise AssertionError("Ray still lists %s 120 s after vLLM lost its rank" % ray_alive_hosts())
        rc, changed, out, _seconds = play()
    finally:
        podman(WORKER, "systemctl", "--user", "kill", "--signal=SIGCONT", "laguna-ray-worker.service", user=USER,
               check=False)
    assert rc == 0, out[-3000:]
    assert "unit laguna-vllm changed" in out and "Laguna-S-2.1-FP8 changed: model-" in out, out[:3000]
    assert "unit laguna-ray-worker is active but its process" in out and "stopped (SIGSTOP)" in out, out[:3000]
    assert "poolside/Laguna-S-2.1-FP8@main moved on the Hub to commit" in out, out[:3000]
    # Ray's own list of nodes (its dashboard on the head), which dropped the frozen worker.
    assert "the nodes Ray lists as alive changed (laguna-head, laguna-worker -> laguna-head)" in out, out[:3000]
    assert "path /etc/systemd/system/multi-user.target.wants/%s changed" % FIREWALL_UNIT in out, out[:3000]
    assert podman(WORKER, "systemctl", "is-enabled", FIREWALL_UNIT) == "enabled"
    assert unit(WORKER, "laguna-ray-worker", "MainPID")["MainPID"] != raylet
    assert not [s for s in podman(WORKER, "ps", "-o", "stat=", "-u", USER).split() if s.startswith("T")]
    assert changed[HEAD] >= 1 and vllm_pid() != before and healthy()


def test_a_full_rerun_changes_nothing_and_no_model_byte_was_lost(digests_before):
    # Timed against a bare gather-facts + ping play in the same run
    # (scripts/noop_ratio.py): the complete run takes the fast no-op path
    # (goal: within 3x the ping play); the same no-op with every role's
    # checks (laguna_fast_noop=false) must change nothing either.
    result = noop_ratio.measure(INVENTORY, pings=3, full=True)
    assert result["site_rc"] == 0, result["site_tail"]
    assert result["site_changed"] == {HEAD: 0, WORKER: 0}, result["site_tail"]
    assert result["full_rc"] == 0 and result["full_changed"] == {HEAD: 0, WORKER: 0}, result["full_tail"]
    record = {k: v for k, v in result.items() if not k.endswith("_tail")}
    print("\nNOOP-RATIO " + json.dumps(record, sort_keys=True))
    os.makedirs(MEASUREMENTS, exist_ok=True)
    with open(os.path.join(MEASUREMENTS, "noop-ratio.json"), "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
    assert result["site_noop_ratio"] <= 3, record
    # Issue 20, item 1: on nodes as wanted, each role that reads a node in one
    # call (its probe) reaches each node with that call only; the roles that
    # still check one module call at a time are bounded at what they make now.
    over = {(host, role): (calls, NODE_CALLS.get(role, 1))
            for host, roles in result["full_node_calls"].items() for role, calls in roles.items()
            if calls > NODE_CALLS.get(role, 1)}
    assert not over, (over, result["full_node_calls"])
    assert model_digests() == digests_before
    # No secret in clear in the runs' output, the fast path's records or the reports.
    secrets = {"API key": API_KEY, "Ray token": podman(HEAD, "cat", RAY_TOKEN_PATH, user=USER)}
    assert len(secrets["Ray token"]) == 64
    # The roles that carry them, verbose (module arguments and results shown), changing nothing.
    # -vvv: the module arguments too (each task's invocation), where a no_log
    # option would show were it not censored.
    rc, changed, verbose, _seconds = play("--tags", "ray_cluster,vllm_serve", "-vvv")
    assert rc == 0 and changed == {HEAD: 0, WORKER: 0}, verbose[-3000:]
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in verbose or "censored" in verbose, verbose[-3000:]
    places = {"site run": result["site_tail"], "no-op with every role": result["full_tail"],
              "verbose ray_cluster,vllm_serve run": verbose}
    for host in (HEAD, WORKER):
        places["record on " + host] = podman(host, "cat", "/home/spark/.local/state/laguna-spark/converged.json",
                                             user=USER)
        places["units on " + host] = podman(host, "bash", "-c", "systemctl --user show 'laguna-*' "
                                            "/home/spark/.config/systemd/user/* 2>/dev/null; true", user=USER)
    for name in ("verify.json",):
        path = os.path.join(EPHEMERAL, name)
        places[name] = open(path).read() if os.path.exists(path) else ""
    for base, _dirs, files in os.walk(os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "benchmark-results")):
        for name in files:
            with open(os.path.join(base, name), "rb") as handle:
                places[os.path.join(base, name)] = handle.read().decode("utf-8", "replace")
    leaks = [(secret, place) for secret, value in secrets.items() for place, text in places.items() if value in text]
    assert not leaks, leaks
