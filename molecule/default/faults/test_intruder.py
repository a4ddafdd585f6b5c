"""A stranger on the cluster's network (molecule side effect, before the faults).

A third container on the test network (the Sparks' LAN in real life), from
the same node image, with the same Ray 2.60 and Python from the same package
index, tries what the "ShadowRay" attacks do against an open Ray cluster:
`ray status` against the head, joining as a node, running a task on the
head, a chat completion without the API key, and a TCP connect to every port
a Ray process listens on. Each is refused. The same tries from a cluster
node show which layer refuses what: from the worker's address the firewall
admits the connection, and Ray refuses a client without the token (or with a
wrong one) and admits one with it; so the tests cannot pass by a broken
cluster. Afterwards the cluster is as before (same units, same PIDs, two
nodes).
"""

import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_faults import API_KEY, HEAD, RAY_CLIENT, RAY_TOKEN_PATH, USER, VENV, WORKER, podman, unit  # noqa: E402
from helpers import constants as c  # noqa: E402  (test_faults puts tests/ on sys.path)

INTRUDER, INTRUDER_IP = "laguna-intruder", "10.89.77.13"
IMAGE = "localhost/laguna-spark-node:latest"
HEAD_IP, WORKER_IP = c.MOLECULE_ROCE_IP[HEAD], c.MOLECULE_ROCE_IP[WORKER]
# What the firewall role guards: laguna_ray_port and laguna_ray_ports (roles/laguna/defaults), and
# with laguna_monitoring (on in the scenario) laguna_monitoring_ports.
GUARDED = {6379, 6380, 6381, 6382, 6383, 6384, 52365, 10001, 8265, 44217, 44227} | set(range(10002, 20000))
MONITORING_PORTS = {"node_exporter": 9100, "prometheus": 9090}
INTRUDER_RAY = "/opt/ray/bin"
# A driver that runs a task pinned to the head node, as the reported attack did.
DRIVER = ("import ray, sys\n"
          "ray.init(address=sys.argv[1], log_to_driver=False)\n"
          "head = [n['NodeID'] for n in ray.nodes() if n['NodeManagerAddress'] == '%s'][0]\n"
          "s = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(head, soft=False)\n"
          "print('RAN', ray.get(ray.remote(num_cpus=0)(lambda: open('/etc/hostname').read())"
          ".options(scheduling_strategy=s).remote()))\n" % HEAD_IP)
LISTENERS = r"""
import glob, os, socket, struct
def addr(hexaddr):
    host, port = hexaddr.split(':')
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    words = struct.unpack('<4I', raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack('>4I', *words)), int(port, 16)
inodes = {}
for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if f[3] == '0A':
            host, port = addr(f[1])
            inodes[f[9]] = (host, port)
for fd in glob.glob('/proc/[0-9]*/fd/*'):
    try:
        target = os.readlink(fd)
    except OSError:
        continue
    if target.startswith('socket:[') and target[8:-1] in inodes:
        pid = fd.split('/')[2]
        comm = open('/proc/%s/comm' % pid).read().strip()
        host, port = inodes[target[8:-1]]
        print(host, port, comm)
"""


def listeners(host):
    """(address, port, command) of every TCP socket the service user's processes listen on."""
    out = podman(host, "python3", "-c", LISTENERS, user=USER)
    return sorted({(a, int(p), c) for a, p, c in (line.split(" ", 2) for line in out.splitlines())})


def exposed_ray_ports(host):
    """Ports of Ray's processes reachable from the network (not only on loopback); the API is not Ray's."""
    return sorted({port for address, port, _comm in listeners(host)
                   if address not in ("127.0.0.1", "::1") and port != 8000})


def try_connect(host, ports, target):
    """From ``host``: {port: 'refused' | 'open' | error} for a TCP connect to each port of ``target``."""
    script = ("import json, socket, sys\n"
              "out = {}\n"
              "for p in json.loads(sys.argv[2]):\n"
              "    try:\n"
              "        socket.create_connection((sys.argv[1], p), timeout=3).close(); out[p] = 'open'\n"
              "    except ConnectionRefusedError:\n"
              "        out[p] = 'refused'\n"
              "    except OSError as exc:\n"
              "        out[p] = type(exc).__name__\n"
              "print(json.dumps(out))\n")
    return {int(k): v for k, v in json.loads(podman(host, "python3", "-c", script, target,
                                                    json.dumps(ports), timeout=300)).items()}


def sh(host, command, user=None, timeout=120):
    """(rc, output) of a shell command in ``host``."""
    argv = ["podman", "exec"] + (["-u", user] if user else []) + [host, "bash", "-c", command]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def concurrently(*calls, timeout=120):
    """[(rc, output)] of several sh(host, command) calls run at the same
    time, in the order given (bounded: each by ``timeout``)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(sh, host, command, timeout=timeout) for host, command in calls]
        return [future.result() for future in futures]


def cluster_state():
    pids = {name: unit(host, name, "MainPID")["MainPID"]
            for host, name in ((HEAD, "laguna-ray-head"), (WORKER, "laguna-ray-worker"), (HEAD, "laguna-vllm"))}
    rc, out = sh(HEAD, "%s %s/bin/ray status --address %s:6379" % (RAY_CLIENT, VENV, HEAD_IP), user=USER)
    assert rc == 0, out
    active = out.split("Active:")[1].split("Pending:")[0]
    return pids, len([line for line in active.splitlines() if "node_" in line])


@pytest.fixture(scope="module")
def before():
    pids, nodes = cluster_state()
    assert nodes == 2 and all(pid != "0" for pid in pids.values()), (pids, nodes)
    return pids


@pytest.fixture(scope="module")
def intruder(before):
    """A stranger's container on the test network, with Ray 2.60 from the nodes' own index."""
    subprocess.run(["podman", "rm", "-f", "-t", "0", INTRUDER], capture_output=True, check=False)
    subprocess.run(["podman", "run", "-d", "--name", INTRUDER, "--hostname", INTRUDER, "--network",
                    "laguna-molecule", "--ip", INTRUDER_IP, "--label", "owner=molecule", IMAGE, "sleep", "3600"],
                   capture_output=True, check=True, timeout=120)
    try:
        rc, out = sh(INTRUDER, "python3 -m venv /opt/ray && /opt/ray/bin/pip install -q --index-url "
                               "http://10.89.77.1:8765/simple --trusted-host 10.89.77.1 ray==2.60.0", timeout=900)
        assert rc == 0, out[-3000:]
        yield INTRUDER
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", INTRUDER], capture_output=True, check=False)


def test_every_port_ray_listens_on_is_guarded_and_refuses_a_stranger(intruder):
    for host, ip in ((HEAD, HEAD_IP), (WORKER, WORKER_IP)):
        ports = exposed_ray_ports(host)
        # Not vacuous: the head's GCS and every node's node manager are there.
        assert 6380 in ports and (host != HEAD or 6379 in ports), (host, listeners(host))
        assert set(ports) <= GUARDED, ("unguarded Ray ports on %s: %s" % (host, sorted(set(ports) - GUARDED)),
                                       listeners(host))
        outcome = try_connect(intruder, ports, ip)
        assert set(outcome.values()) == {"refused"}, (host, outcome)
    # The firewall admits the cluster's own nodes.
    assert try_connect(WORKER, [6379, 6380], HEAD_IP) == {6379: "open", 6380: "open"}


def test_the_node_exporters_answer_the_cluster_and_refuse_a_stranger(intruder):
    """The node exporter listens on each node's RoCE address for the head's Prometheus; the firewall
    admits the cluster's nodes there and refuses the stranger (Prometheus listens on loopback)."""
    port = MONITORING_PORTS["node_exporter"]
    for ip in (HEAD_IP, WORKER_IP):
        assert try_connect(intruder, [port], ip) == {port: "refused"}, ip
    assert try_connect(HEAD, [port], WORKER_IP) == {port: "open"}
    assert try_connect(WORKER, [port], HEAD_IP) == {port: "open"}


def test_ray_refuses_a_stranger_with_or_without_the_token(intruder):
    token = podman(HEAD, "cat", RAY_TOKEN_PATH, user=USER)
    # Both tries at once (each may wait out its timeout), judged one by one.
    without, with_token = concurrently(
        (intruder, "timeout 20 %s/ray status --address %s:6379" % (INTRUDER_RAY, HEAD_IP)),
        (intruder, "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=%s timeout 20 %s/ray status --address %s:6379"
         % (shlex.quote(token), INTRUDER_RAY, HEAD_IP)))
    for rc, out in (without, with_token):
        assert rc != 0 and "Active:" not in out, out[-2000:]


def test_a_stranger_cannot_join_or_run_a_task_on_the_head(intruder):
    # The join and the task at once (each may wait out its timeout), judged one by one.
    (rc, out), (task_rc, task_out) = concurrently(
        (intruder, "timeout 30 %s/ray start --block --address=%s:6379 --node-ip-address=%s"
         % (INTRUDER_RAY, HEAD_IP, INTRUDER_IP)),
        (intruder, "timeout 30 %s/python -c %s %s:6379" % (INTRUDER_RAY, shlex.quote(DRIVER), HEAD_IP)))
    assert rc != 0, out[-2000:]
    assert task_rc != 0 and "RAN" not in task_out, task_out[-2000:]


def test_the_api_refuses_a_completion_without_the_key(intruder):
    script = ("import json, sys, urllib.request, urllib.error\n"
              "body = json.dumps({'model': '%s', 'max_tokens': 4," % c.SERVED_MODEL +
              " 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n"
              "headers = {'Content-Type': 'application/json'}\n"
              "if len(sys.argv) > 1:\n"
              "    headers['Authorization'] = 'Bearer ' + sys.argv[1]\n"
              "req = urllib.request.Request('http://%s:8000/v1/chat/completions', data=body, headers=headers)\n"
              "try:\n"
              "    print(urllib.request.urlopen(req, timeout=30).status)\n"
              "except urllib.error.HTTPError as exc:\n"
              "    print(exc.code, exc.read().decode())\n" % HEAD_IP)
    assert podman(intruder, "python3", "-c", script) == '401 {"error":"Unauthorized"}'
    assert podman(intruder, "python3", "-c", script, "not-the-key") == '401 {"error":"Unauthorized"}'
    assert podman(intruder, "python3", "-c", script, API_KEY) == "200"


def test_a_cluster_node_is_admitted_only_with_the_token(before):
    ray = "timeout 60 %s/bin/ray status --address %s:6379" % (VENV, HEAD_IP)
    rc, out = sh(WORKER, ray, user=USER)
    assert rc != 0 and "Active:" not in out, out[-2000:]
    rc, out = sh(WORKER, "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=%064x %s" % (7, ray), user=USER)
    assert rc != 0 and "Active:" not in out, out[-2000:]
    rc, out = sh(WORKER, "%s %s" % (RAY_CLIENT, ray), user=USER)
    assert rc == 0 and "Active:" in out, out[-2000:]


def test_the_cluster_is_unchanged_afterwards(before):
    pids, nodes = cluster_state()
    assert pids == before and nodes == 2, (before, pids, nodes)
    # The token file is the service user's alone.
    assert podman(HEAD, "stat", "-c", "%a %U", RAY_TOKEN_PATH) == "600 spark"
    assert podman(WORKER, "stat", "-c", "%a %U", RAY_TOKEN_PATH) == "600 spark"
