"""What the staging tests run against: the real `hf` (scripts/hf-venv.sh), the
Hub double (tests/doubles/hub/hub.py) on 127.0.0.1, and a private sshd on
127.0.0.2 standing in for a worker (the head is 127.0.0.1)."""
import getpass
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import DOUBLES, ROOT, draft_fixtures

HUB = os.path.join(DOUBLES, "hub", "hub.py")
TARGET, DRAFT = "poolside/Laguna-S-2.1-FP8", "sapidlabs/Sparkulator-Laguna-S-2.1"
SHARD_BYTES = 1 << 20


def real_hf():
    """The pinned huggingface_hub's `hf`, built once into .cache/hf-venv."""
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "hf-venv.sh")], check=True,
                         capture_output=True, text=True, timeout=600)
    return out.stdout.strip().splitlines()[-1]


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pids(pattern):
    """PIDs whose command line contains every string of ``pattern``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % entry) as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if all(p in cmd for p in pattern):
            found.append(int(entry))
    return found


class HubDouble:
    def __init__(self, tmp_path, target_shards=24):
        self.root = tmp_path / "hub"
        self.log = tmp_path / "hub-requests.jsonl"
        self.proc = None
        subprocess.run([sys.executable, HUB, "generate", "--root", str(self.root), "--repo", TARGET,
                        "--shards", str(target_shards), "--shard-bytes", str(SHARD_BYTES)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, HUB, "generate", "--root", str(self.root), "--repo", DRAFT,
                        "--shards", "1", "--shard-bytes", str(SHARD_BYTES // 2)], check=True,
                       stdout=subprocess.DEVNULL)
        # The draft's config is a W4A16 DFlash draft's whose ignore list has
        # literal names, as quantizing tools write them (staging_fix_draft_ignore).
        with open(self.root / DRAFT / "config.json", "w") as handle:
            json.dump(draft_fixtures.draft_config("poolside/Laguna-S-2.1-DFlash-FP8",
                                                  draft_fixtures.w4a16_quant(draft_fixtures.LITERAL_IGNORE)),
                      handle, indent=2)
        self.port_file = tmp_path / "hub.port"
        self.rate_file = tmp_path / "hub.rate"

    def set_rate(self, rate):
        """Bytes/s per response from now on (0: unthrottled); the server reads it live."""
        tmp = self.rate_file.with_suffix(".tmp")
        tmp.write_text(str(rate))
        tmp.replace(self.rate_file)

    def start(self, rate=0):
        self.stop()
        self.set_rate(rate)
        if self.port_file.exists():
            self.port_file.unlink()
        self.proc = subprocess.Popen([sys.executable, HUB, "serve", "--root", str(self.root), "--port", "0",
                                      "--port-file", str(self.port_file), "--log", str(self.log),
                                      "--rate-file", str(self.rate_file)], stderr=subprocess.DEVNULL)
        for _attempt in range(100):
            if self.port_file.exists():
                self.endpoint = "http://127.0.0.1:%s" % self.port_file.read_text()
                return self
            time.sleep(0.05)
        raise RuntimeError("hub double did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def published(self, repo=TARGET):
        """path -> sha256 as the Hub double publishes it."""
        top = self.root / repo
        return {p.name: sha256(p) for p in sorted(top.iterdir())}

    def requests(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def downloads(self, name):
        """Bytes of ``name`` sent by GETs, per request."""
        return [r["sent"] for r in self.requests()
                if r["method"] == "GET" and r.get("file") == name and "/resolve/" in r["path"]]


class Sshd:
    """sshd on 127.0.0.1 with its own host key, config and authorized key."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "sshd"
        self.dir.mkdir()
        self.key = self.dir / "id_ed25519"
        for path, comment in ((self.dir / "host_ed25519", "host"), (self.key, "client")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
        shutil.copy(str(self.key) + ".pub", self.dir / "authorized_keys")
        os.makedirs("/run/sshd", exist_ok=True)
        from helpers import free_port
        self.port = free_port()
        (self.dir / "sshd_config").write_text("\n".join([
            "Port %d" % self.port, "ListenAddress 127.0.0.1", "ListenAddress 127.0.0.2", "HostKey %s/host_ed25519" % self.dir,
            "PidFile %s/sshd.pid" % self.dir, "AuthorizedKeysFile %s/authorized_keys" % self.dir,
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "MaxStartups 64:30:128", "MaxSessions 64",
            "Ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com", ""]))
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stderr=open(self.dir / "sshd.log", "w"))
        for _attempt in range(100):
            probe = subprocess.run(["ssh"] + self.options() + ["root@127.0.0.2", "true"], capture_output=True, check=False)
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("private sshd did not come up: %s" % (self.dir / "sshd.log").read_text())

    def options(self):
        return ["-p", str(self.port), "-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def hf_bin():
    return real_hf()


@pytest.fixture
def hub(tmp_path):
    double = HubDouble(tmp_path).start()
    yield double
    double.stop()


@pytest.fixture
def sshd(tmp_path):
    if not os.path.exists("/usr/sbin/sshd") or os.geteuid() != 0:
        pytest.skip("needs openssh-server and root for a private sshd on 127.0.0.1")
    server = Sshd(tmp_path)
    yield server
    server.stop()


def staging_vars(tmp_path, hub, hf_bin, **more):
    models = tmp_path / "models"
    values = {
        "laguna_user": getpass.getuser(),
        "laguna_model_path": str(models / "target"),
        "laguna_draft_path": str(models / "draft"),
        "laguna_draft_repo": DRAFT,
        "staging_hf_bin": hf_bin,
        "staging_hf_environment": {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home"),
                                   "HF_HUB_DISABLE_TELEMETRY": "1"},
        "staging_hash_cache": str(tmp_path / "head-cache" / "sha256.json"),
        "staging_progress_interval": 1,
    }
    values.update(more)
    return values


def leftovers(tree):
    """Partial or stray files in a model tree (hf's own metadata aside)."""
    out = []
    for path in tree.rglob("*"):
        rel = path.relative_to(tree).as_posix()
        if path.is_dir():
            continue
        if rel.startswith(".cache/huggingface/") and (
                rel.endswith(".metadata") or rel.endswith(".json") and "/trees/" in rel
                or rel.split("/")[-1] in (".gitignore", "CACHEDIR.TAG")):
            continue
        if rel.startswith(".cache/") or rel.endswith(".incomplete") or rel.split("/")[-1].startswith("."):
            out.append(rel)
    return sorted(out)


def kill_when(pattern, ready, timeout=60):
    """SIGKILL the processes matching ``pattern`` once ``ready()`` is true; returns their pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pids(pattern)
        if found and ready():
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return found
        time.sleep(0.05)
    raise AssertionError("%s never became ready to kill" % (pattern,))


def run_play(runner, tasks_yaml, extravars, inventory, cmdline=None, hosts="all"):
    """Like conftest's Runner.run, with an inventory of our own (a head and a worker)."""
    import ansible_runner
    from helpers.collection import collections_path
    collections = collections_path()
    runner.runs += 1
    data = runner.base / ("runner-%d" % runner.runs)
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    (data / "inventory" / "hosts").write_text(inventory)
    (data / "project" / "play.yml").write_text(
        "- hosts: %s\n  gather_facts: false\n  tasks:\n" % hosts + tasks_yaml)
    result = ansible_runner.run(
        private_data_dir=str(data), playbook="play.yml", extravars=extravars, cmdline=cmdline, quiet=True,
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DIFF_ALWAYS": "0"})
    result.text = result.stdout.read()
    result.flat = " ".join(result.text.split())
    return result
