"""What a converged pair of Sparks must look like (testinfra, after converge + idempotence)."""
import json
import os
import sys

import pytest
import testinfra.utils.ansible_runner

# tests/helpers, shared with the other suites (pytest.ini puts tests/ on sys.path too).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests"))
from helpers import constants as c  # noqa: E402  pylint: disable=wrong-import-position

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

USER, UID, HOME = c.MOLECULE_USER, c.MOLECULE_UID, c.MOLECULE_HOME
VENV, MODEL, DRAFT = c.MOLECULE_VENV, c.MOLECULE_MODEL, c.MOLECULE_DRAFT
HEAD, WORKER = c.MOLECULE_HEAD, c.MOLECULE_WORKER
ROCE_IP = c.MOLECULE_ROCE_IP
GID_INDEX = {HEAD: "3", WORKER: "5"}


def name(host):
    return host.backend.get_hostname()


def is_head(host):
    return name(host) == HEAD


def as_user(host, cmd):
    return host.run("sudo -u %s XDG_RUNTIME_DIR=/run/user/%d %s" % (USER, UID, cmd))


def unit_props(host, unit, *props):
    out = as_user(host, "systemctl --user show %s.service %s" % (unit, " ".join("--property=" + p for p in props)))
    assert out.rc == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def http(host, path, body=None):
    script = (
        "import json, sys, urllib.request\n"
        "body = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None\n"
        "req = urllib.request.Request('http://127.0.0.1:%d' + sys.argv[1],"
        " data=json.dumps(body).encode() if body else None, headers={'Content-Type': 'application/json',"
        " 'Authorization': 'Bearer %s'})\n"  # molecule.yml's vllm_serve_api_key
        "print(urllib.request.urlopen(req, timeout=60).read().decode())\n"
    ) % (c.API_PORT, c.MOLECULE_API_KEY)
    args = [path] + ([json.dumps(body)] if body is not None else [])
    out = host.run("python3 -c %s %s" % (_q(script), " ".join(_q(a) for a in args)))
    assert out.rc == 0, out.stderr
    return out.stdout


def _q(text):
    return "'" + text.replace("'", "'\\''") + "'"


def test_linger_is_on(host):
    assert host.file("/var/lib/systemd/linger/%s" % USER).exists
    assert host.check_output("loginctl show-user %s --property=Linger" % USER) == "Linger=yes"


def test_raylet_is_a_user_service_with_the_recipe_settings(host):
    unit = c.RAY_HEAD_UNIT if is_head(host) else c.RAY_WORKER_UNIT
    props = unit_props(host, unit, "ActiveState", "LimitMEMLOCK", "MemoryHigh", "MemoryMax",
                       "MemorySwapMax", "Environment", "ExecStart")
    assert props["ActiveState"] == "active"
    assert props["LimitMEMLOCK"] == "infinity"
    assert props["MemoryHigh"] == "infinity"  # the recipe sets none
    assert props["MemoryMax"] == str((98 if is_head(host) else 110) * 1024 ** 3)
    assert props["MemorySwapMax"] == "0"
    env = dict(item.split("=", 1) for item in props["Environment"].split())
    # One device on the fake tree: the head's own GID is NCCL's choice; on the
    # worker an older address comes first, so the index is pinned.
    assert env.get("NCCL_IB_GID_INDEX") == (None if is_head(host) else "5")
    assert env["NCCL_IB_HCA"] == "=rocep1s0f1:1"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["VLLM_HOST_IP"] == ROCE_IP[name(host)]
    assert env["RAY_memory_monitor_refresh_ms"] == "0"
    assert env["PATH"].startswith("%s/bin:%s/.local/bin:/opt/laguna-standin/cuda/bin:" % (VENV, HOME))
    assert "--block" in props["ExecStart"] and "--num-gpus=1 " in props["ExecStart"]
    assert "--object-store-memory=80000000" in props["ExecStart"]
    scopes = as_user(host, "systemctl --user list-units --type=scope --all --no-legend").stdout
    assert "laguna" not in scopes


def test_the_venv_was_installed_from_the_pins(host):
    pip = as_user(host, "%s/bin/python -m pip list --format=json" % VENV)
    assert pip.rc == 0, pip.stderr
    versions = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(pip.stdout)}
    assert versions["vllm"] == "0.25.1" and versions["torch"] == "2.11.0+cu130"
    assert versions["ray"] == "2.60.0" and versions["huggingface-hub"] == "2.4.0"
    assert "ninja" in versions


def test_the_service_user_has_a_key_and_knows_the_other_node(host):
    assert host.file("%s/.ssh/id_ed25519" % HOME).mode == 0o600
    other = ROCE_IP[WORKER] if is_head(host) else ROCE_IP[HEAD]
    known = as_user(host, "ssh-keygen -F %s -f %s/.ssh/known_hosts" % (other, HOME))
    assert known.rc == 0 and other in known.stdout
    probe = as_user(host, "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes %s@%s true" % (USER, other))
    assert probe.rc == 0, probe.stderr


def test_ray_status_shows_every_node_and_gpu(host):
    if not is_head(host):
        pytest.skip("ray status is read on the head")
    out = as_user(host, "RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=%s "
                        "%s/bin/ray status --address %s:6379" % (c.MOLECULE_RAY_TOKEN_PATH, VENV, ROCE_IP[HEAD]))
    assert out.rc == 0, out.stderr
    active = out.stdout.split("Active:")[1].split("Pending:")[0]
    assert len([line for line in active.splitlines() if "node_" in line]) == 2
    assert "/2.0 GPU" in out.stdout


def test_vllm_is_patched_with_a_backup(host):
    models = host.check_output("%s/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'" % VENV)
    path = "%s/vllm/model_executor/models/laguna_dflash.py" % models
    assert host.file(path).contains('hasattr(self.quant_config, "get_cache_scale")')
    backups = host.check_output("ls %s/vllm/model_executor/models/ | grep -c '^laguna_dflash.py.*~$' || true" % models)
    assert backups == "1"


def test_checkpoints_are_complete_and_identical_on_every_node(host):
    shards = host.check_output("ls %s | grep -c '^model-000[0-9][0-9]-of-00024.safetensors$'" % MODEL)
    assert shards == "24"
    assert host.file("%s/model.safetensors" % DRAFT).exists
    assert host.run("find %s %s -name '*.incomplete' | grep -q ." % (MODEL, DRAFT)).rc == 1
    digest = host.check_output("cd %s && sha256sum model-*.safetensors config.json | sha256sum" % MODEL)
    head = testinfra.get_host("ansible://%s?ansible_inventory=%s" % (HEAD, os.environ["MOLECULE_INVENTORY_FILE"]))
    assert digest == head.check_output("cd %s && sha256sum model-*.safetensors config.json | sha256sum" % MODEL)


def test_downloaded_once_on_the_head_only(host):
    # The Hub double on the head logs every request: each file went over once.
    if not is_head(host):
        assert host.run("test -e /var/log/laguna-hub.jsonl").rc == 1
        return
    requests = [json.loads(line) for line in host.file("/var/log/laguna-hub.jsonl").content_string.splitlines()]
    gets = [r["path"] for r in requests if r["method"] == "GET" and "/resolve/" in r["path"]]
    shards = [p for p in gets if p.startswith("/poolside/Laguna-S-2.1-FP8/") and p.endswith(".safetensors")]
    assert len(shards) == 24 and len(set(shards)) == 24
    assert any(p.startswith("/sapidlabs/Sparkulator-Laguna-S-2.1/") for p in gets)


def test_vllm_serve_runs_the_recipe_command_under_a_memory_cap(host):
    if not is_head(host):
        assert unit_props(host, c.VLLM_UNIT, "ActiveState")["ActiveState"] == "inactive"
        return
    props = unit_props(host, c.VLLM_UNIT, "ActiveState", "MemoryMax", "MemorySwapMax", "MainPID", "Environment")
    assert props["ActiveState"] == "active"
    assert props["MemoryMax"] == str(12 * 1024 ** 3) and props["MemorySwapMax"] == "0"
    assert "RAY_ADDRESS=%s:6379" % ROCE_IP[HEAD] in props["Environment"]
    argv = host.file("/proc/%s/cmdline" % props["MainPID"]).content_string.split("\0")
    assert argv[argv.index("serve") + 1] == MODEL
    for flag, value in [("--distributed-executor-backend", "ray"), ("--tensor-parallel-size", "2"),
                        ("--max-model-len", str(c.MAX_MODEL_LEN)), ("--kv-cache-memory-bytes", "5368709120"),
                        ("--gpu-memory-utilization", "0.85"), ("--served-model-name", c.SERVED_MODEL),
                        ("--max-num-seqs", "2"), ("--max-num-batched-tokens", "8192"), ("--port", str(c.API_PORT))]:
        assert argv[argv.index(flag) + 1] == value
    assert "--enforce-eager" in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "dflash", "model": DRAFT, "num_speculative_tokens": 6}


def test_api_answers_deterministically_and_drafts_are_accepted(host):
    if not is_head(host):
        pytest.skip("the API runs on the head")
    models = json.loads(http(host, "/v1/models"))
    assert [m["id"] for m in models["data"]] == [c.SERVED_MODEL]
    body = {"model": c.SERVED_MODEL, "temperature": 0, "max_tokens": 12,
            "messages": [{"role": "user", "content": "def fib(n):"}]}
    first = json.loads(http(host, "/v1/chat/completions", body))
    second = json.loads(http(host, "/v1/chat/completions", body))
    assert first["choices"][0]["message"]["content"]
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
    metrics = http(host, "/metrics")
    accepted = [line for line in metrics.splitlines() if line.startswith("vllm:spec_decode_num_accepted_tokens_total")]
    assert accepted and float(accepted[0].split()[-1]) > 0
