"""The ssh_mesh role through ansible-runner on two inventory hosts that are both this machine
(each with a home and an sshd key directory of its own under tmp_path): the peers' host keys are
pinned from the real hostvars, a changed one is refused naming the host, both fingerprints and the
fixes, and replaced only with ssh_mesh_accept_changed_host_keys."""
import getpass
import subprocess
import sys

import ansible_runner
import pytest

from helpers import role_events
from helpers.collection import collections_path

COLLECTIONS = collections_path()

pytestmark = pytest.mark.integration

LOCAL = "ansible_connection=local ansible_python_interpreter=%s" % sys.executable
HOSTS = {"spark-1": "10.89.77.11", "spark-2": "10.89.77.12"}


def host_key(etc):
    """A fresh ed25519 sshd host key in ``etc``; its `ssh-keygen -lf` fingerprint."""
    etc.mkdir(parents=True, exist_ok=True)
    for old in etc.glob("ssh_host_*"):
        old.unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(etc / "ssh_host_ed25519_key")],
                   check=True)
    return subprocess.run(["ssh-keygen", "-lf", str(etc / "ssh_host_ed25519_key.pub")], check=True,
                          capture_output=True, text=True).stdout.split()[1]


@pytest.fixture
def mesh(tmp_path):
    fingerprints = {host: host_key(tmp_path / host / "etc") for host in HOSTS}
    for host in HOSTS:
        (tmp_path / host / "home").mkdir()
    runs = []

    def run(*extra):
        data = tmp_path / ("run-%d" % len(runs))
        runs.append(data)
        (data / "project").mkdir(parents=True)
        (data / "inventory").mkdir()
        line = {host: "%s %s laguna_roce_ip=%s ssh_mesh_host_key_dir=%s mesh_test_home=%s"
                % (host, LOCAL, ip, tmp_path / host / "etc", tmp_path / host / "home") for host, ip in HOSTS.items()}
        (data / "inventory" / "hosts").write_text(
            "[spark_head]\n%s\n[spark_workers]\n%s\n" % (line["spark-1"], line["spark-2"]))
        (data / "project" / "play.yml").write_text(
            "- hosts: spark_head:spark_workers\n  gather_facts: false\n  roles:\n    - laguna.spark.ssh_mesh\n")
        result = ansible_runner.run(
            private_data_dir=str(data), playbook="play.yml",
            # laguna_home: each host's own home under tmp_path (an extra var beats the laguna role's fact).
            extravars={"laguna_user": getpass.getuser(), "laguna_home": "{{ mesh_test_home }}",
                       "laguna_fast_noop": False},
            cmdline=" ".join(extra) or None, quiet=True,
            envvars={"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_NOCOLOR": "1"})
        result.text = result.stdout.read()
        result.flat = " ".join(result.text.split())
        result.changed = {host: result.stats["changed"].get(host, 0) for host in HOSTS} if result.stats else {}
        # The ssh_mesh tasks that reached a node (not controller-side, not skipped), per host.
        result.reached = {host: role_events.node_tasks(result.events, "ssh_mesh", host=host) for host in HOSTS}
        return result

    run.fingerprints = fingerprints
    run.known_hosts = lambda host: (tmp_path / host / "home" / ".ssh" / "known_hosts")
    run.etc = lambda host: tmp_path / host / "etc"
    return run


def pinned(path, name):
    """ssh-keygen -F's lines for ``name`` in ``path`` (OpenSSH reading the file)."""
    found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if not line.startswith("#")]


def test_a_changed_peer_host_key_is_refused_until_accepted(mesh):
    first = mesh()
    assert first.rc == 0, first.text
    head_file = mesh.known_hosts("spark-1")
    worker_key = (mesh.etc("spark-2") / "ssh_host_ed25519_key.pub").read_text().split()[1]
    assert [line.split()[2] for line in pinned(head_file, "10.89.77.12")] == [worker_key]
    assert len(pinned(mesh.known_hosts("spark-2"), "10.89.77.11")) == 1
    assert oct(head_file.stat().st_mode & 0o777) == "0o600"

    again = mesh()
    assert again.rc == 0 and again.changed == {"spark-1": 0, "spark-2": 0}, again.text
    # A converged node: two calls (each node needs the others' keys), nothing else reaches it.
    assert again.reached == {host: ["laguna.spark.ssh_mesh_node_keys", "laguna.spark.ssh_mesh_peers"]
                             for host in HOSTS}, again.reached

    # Drift on spark-1: --check --diff names each difference and changes nothing; a run repairs it.
    ssh_dir = head_file.parent
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text("# mine\n")
    ssh_dir.chmod(0o755)
    checked = mesh("--check", "--diff")
    assert checked.rc == 0 and checked.changed["spark-1"] >= 1 and checked.changed["spark-2"] == 0, checked.text
    for part in ("%s: mode 0755 -> 0700" % ssh_dir, "%s: authorize" % authorized, "+ssh-ed25519 "):
        assert part in checked.text, part
    assert authorized.read_text() == "# mine\n" and oct(ssh_dir.stat().st_mode & 0o777) == "0o755"
    repaired = mesh()
    assert repaired.rc == 0 and repaired.changed["spark-1"] >= 1, repaired.text
    assert authorized.read_text().startswith("# mine\nssh-ed25519 ") and oct(ssh_dir.stat().st_mode & 0o777) == "0o700"
    assert mesh().changed == {"spark-1": 0, "spark-2": 0}

    old = mesh.fingerprints["spark-2"]
    new = host_key(mesh.etc("spark-2"))
    before = head_file.read_text()
    refused = mesh()
    assert refused.rc != 0
    for part in ("spark-2 (10.89.77.12)", old, new, "ssh-keygen -R 10.89.77.12 -f %s" % head_file,
                 "ssh_mesh_accept_changed_host_keys=true"):
        assert part in refused.flat, part
    assert head_file.read_text() == before

    accepted = mesh("-e", "ssh_mesh_accept_changed_host_keys=true")
    assert accepted.rc == 0 and accepted.changed["spark-1"] >= 1, accepted.text
    new_key = (mesh.etc("spark-2") / "ssh_host_ed25519_key.pub").read_text().split()[1]
    assert [line.split()[2] for line in pinned(head_file, "10.89.77.12")] == [new_key]

    last = mesh()
    assert last.rc == 0 and last.changed == {"spark-1": 0, "spark-2": 0}, last.text
