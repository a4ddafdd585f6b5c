"""playbooks/benchmark.yml end to end on localhost, against stand-in `vllm serve` processes.

The playbook runs as users run it (the installed collection's
laguna.spark.benchmark, through ansible-runner): the vllm_serve role restarts
the server for each configuration through `systemd-run --user`, which here is
a fake that really starts the command (and `systemctl --user stop` really
stops it), so every configuration is a fresh stand-in process with its own k.
The report, the JSON and the plots are then checked against the stand-in's
speed model (tests/doubles/vllm_standin/vllm/entrypoints/speed_model.py).
"""
import getpass
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

import ansible_runner
import pytest
from PIL import Image

from helpers import DOUBLES, free_port, interrupt, standin
from helpers.collection import collections_path
from helpers.fake_bin import systemd_on_path

COLLECTIONS = collections_path()
from helpers.sysfs import make_port, mapped
from ansible_collections.laguna.spark.plugins.module_utils import bench_report, procs

speed_model, = standin.modules("vllm.entrypoints.speed_model")

pytestmark = pytest.mark.integration

RECIPE_POS = "0.89,0.76,0.65,0.55,0.48,0.41"
TOKENS_PER_S = 200.0
PREFILL_TOKENS_PER_S = 40000.0
API_KEY = "sk-laguna-bench-0b7e41d9"

# systemd-run / systemctl / journalctl that run and stop real processes.
FAKE_SYSTEMD = r'''
import json, os, signal, subprocess, sys, time
prog, args = os.environ["FAKE_SYSTEMD_PROG"], [a for a in sys.argv[1:] if a != "--user"]
state_file = os.environ["BENCH_SYSTEMD_STATE"]
state = json.load(open(state_file)) if os.path.exists(state_file) else {"units": {}, "calls": []}
state["calls"].append([prog] + args)
units, rc = state["units"], 0

def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False

def props(unit):
    u = units.get(unit)
    if u is None:
        return {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success",
                "MainPID": "0", "Description": unit, "ExecMainStatus": "0"}
    up = u["pid"] and alive(u["pid"])
    if not up and u["state"] == "active":
        u["state"] = "failed"
    return {"LoadState": "loaded", "ActiveState": "active" if up else u["state"],
            "SubState": "running" if up else "dead", "Result": "success" if u["state"] != "failed" else "exit-code",
            "MainPID": str(u["pid"] if up else 0), "Description": u["description"],
            "InvocationID": u.get("invocation", ""), "Environment": u.get("environment", ""),
            "ExecMainStatus": "0" if u["state"] != "failed" else "1"}

def stop(unit):
    u = units.get(unit)
    if not u or not u["pid"]:
        return
    try:
        os.killpg(u["pid"], signal.SIGTERM)
    except OSError:
        pass
    for _attempt in range(100):
        if not alive(u["pid"]):
            break
        time.sleep(0.1)
    else:
        os.killpg(u["pid"], signal.SIGKILL)
    u.update(pid=0, state="inactive")

def unit_of(args):
    for a in args:
        if a.startswith("_SYSTEMD_USER_UNIT="):
            return a.split("=", 1)[1]
    for i, a in enumerate(args):
        if a in ("--unit", "-u") and i + 1 < len(args):
            return args[i + 1] if args[i + 1].endswith(".service") else args[i + 1] + ".service"
    return ""

if prog == "systemctl":
    verb, rest = args[0], args[1:]
    unit = next((a for a in rest if not a.startswith("-")), "")
    if verb == "show":
        wanted = [p for a in rest if a.startswith("--property=") for p in a.split("=", 1)[1].split(",")]
        values = props(unit)
        if "--value" in rest:
            print("\n".join(values.get(p, "") for p in wanted))
        elif wanted:  # as systemd: every property asked for, empty when unset
            print("\n".join("%s=%s" % (p, values.get(p, "")) for p in wanted))
        else:
            print("\n".join("%s=%s" % kv for kv in values.items()))
    elif verb == "stop":
        stop(unit)
    elif verb == "reset-failed":
        if unit in units and props(unit)["ActiveState"] in ("inactive", "failed"):
            del units[unit]
    elif verb == "is-active":
        print(props(unit)["ActiveState"])
    elif verb == "status":
        print("%s - %s" % (unit, props(unit)["ActiveState"]))
elif prog == "systemd-run":
    name = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
    unit = name + ".service"
    if unit in units and props(unit)["ActiveState"] == "active":
        print("Failed to start transient service unit: Unit %s was already loaded" % unit, file=sys.stderr)
        rc = 1
    else:
        command = args[args.index("--") + 1:]
        env = dict(os.environ)
        env.update(a.split("=", 1)[1].split("=", 1) for a in args if a.startswith("--setenv="))
        # The private environment file (the API key, the Ray token) overrides them, as in systemd.
        for a in args:
            if a.startswith("--property=EnvironmentFile="):
                path = a.split("=", 2)[2]
                if not (path.startswith("-") and not os.path.exists(path[1:])):
                    env.update(line.split("=", 1) for line in open(path.lstrip("-")).read().splitlines()
                               if "=" in line and not line.startswith("#"))
        log = os.path.join(os.path.dirname(state_file), unit + ".log")
        with open(log, "a") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        units[unit] = {"pid": proc.pid, "state": "active", "command": command, "log": log,
                       "invocation": "%032x" % (time.time_ns() ^ proc.pid),
                       "environment": " ".join(a.split("=", 1)[1] for a in args if a.startswith("--setenv=")),
                       "description": next((a.split("=", 1)[1] for a in args if a.startswith("--description=")), name)}
        print("Running as unit: %s" % unit, file=sys.stderr)
elif prog == "journalctl":
    unit = unit_of(args)
    if unit in units and os.path.exists(units[unit]["log"]):
        sys.stdout.write(open(units[unit]["log"]).read())
    else:
        print("-- No entries --")
json.dump(state, open(state_file, "w"))
sys.exit(rc)
'''


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A head node on localhost: fake systemd on PATH, a venv whose vllm is the stand-in, staged checkpoints."""
    fake = tmp_path / "fake_systemd_exec.py"
    fake.write_text(FAKE_SYSTEMD)
    systemd_on_path(monkeypatch, tmp_path / "systemd-bin", fake)
    state = tmp_path / "systemd" / "state.json"
    state.parent.mkdir()
    monkeypatch.setenv("BENCH_SYSTEMD_STATE", str(state))

    package = standin.patched_copy(tmp_path / "standin")
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    status = os.path.join(os.path.dirname(DOUBLES), "unit", "fixtures", "ray_status", "two_nodes.txt")
    (venv / "ray").write_text('#!/bin/sh\ncat "%s"\n' % status)
    models = {}
    for name in ("target", "draft"):
        path = tmp_path / "models" / name
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        (path / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
        models[name] = str(path)

    def vllm(broken_k=None):
        """(Re)write bin/vllm; with broken_k, a server with that k dies at start."""
        guard = ""
        if broken_k is not None:
            guard = ('case "$*" in *\'"num_speculative_tokens":%d\'*|*\'"num_speculative_tokens": %d\'*) '
                     'echo "stand-in: k=%d is broken" >&2; exit 1;; esac\n' % (broken_k, broken_k, broken_k))
        (venv / "vllm").write_text('#!/bin/sh\n%sPYTHONPATH="%s" exec "%s" -m vllm.entrypoints.cli "$@"\n'
                                   % (guard, package, sys.executable))
        (venv / "vllm").chmod(0o755)

    vllm()
    (venv / "ray").chmod(0o755)
    port = free_port()
    extravars = {
        "laguna_venv": str(venv.parent),
        "laguna_model_path": models["target"], "laguna_draft_path": models["draft"],
        "staging_artifacts": [{"name": "target", "repo": "poolside/Laguna-S-2.1-FP8", "path": models["target"],
                               "expected_shards": None},
                              {"name": "draft", "repo": "sapidlabs/Sparkulator-Laguna-S-2.1", "path": models["draft"],
                               "expected_shards": None}],
        "laguna_api_port": port,
        "vllm_serve_distributed_executor_backend": "mp",
        "fabric_min_twins": 1,  # the fake sysfs has one RDMA device
        "laguna_nvidia_smi": os.path.join(DOUBLES, "bin", "nvidia-smi"),
        # The stand-in draft is a config.json and a shard, not a loadable DFlash draft.
        "vllm_serve_draft_target_family": "FP8", "vllm_serve_draft_check": False,
        "vllm_serve_max_model_len": 8192,
        # The mp backend: no Ray cluster here, so no Ray token either.
        "laguna_ray_auth": False,
        "vllm_serve_api_retries": 60, "vllm_serve_api_delay": 1,
        "vllm_serve_environment": {
            "LAGUNA_STANDIN_TOKENS_PER_S": str(TOKENS_PER_S),
            "LAGUNA_STANDIN_ACCEPTANCE_PER_POS": RECIPE_POS,
            "LAGUNA_STANDIN_PREFILL_TOKENS_PER_S": str(PREFILL_TOKENS_PER_S)},
        "benchmark_results_dir": str(tmp_path / "results"),
    }

    class Node:
        def systemd(self):
            return json.loads(state.read_text()) if state.exists() else {"units": {}, "calls": []}

        def server_log(self):
            unit = self.systemd()["units"].get("laguna-vllm.service")
            return open(unit["log"]).read() if unit else ""

    result = Node()
    result.vars, result.port, result.tmp, result.vllm = extravars, port, tmp_path, vllm
    yield result
    for unit in result.systemd()["units"].values():
        if unit["pid"]:
            try:
                os.killpg(unit["pid"], signal.SIGTERM)
            except OSError:
                pass


def benchmark_vars(node, **extravars):
    sysfs = make_port(node.tmp / "sys", {3: (mapped("127.0.0.1"), "RoCE v2")})
    return dict(node.vars, laguna_user=getpass.getuser(), laguna_sysfs_infiniband=str(sysfs), **extravars)


def run_benchmark(node, hostvars="", **extravars):
    """ansible-playbook laguna.spark.benchmark (the installed collection's playbook) on localhost.

    The configured vllm_serve settings go in the inventory (hostvars): extra
    vars would outrank the sweep's own."""
    data = node.tmp / ("runner-%d" % time.monotonic_ns())
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    (data / "inventory" / "hosts").write_text(
        "[spark_head]\nlocalhost ansible_connection=local laguna_roce_ip=127.0.0.1 "
        "ansible_python_interpreter=%s %s\n" % (sys.executable, hostvars))
    (data / "project" / "play.yml").write_text("- ansible.builtin.import_playbook: laguna.spark.benchmark\n")
    allvars = benchmark_vars(node, **extravars)
    result = ansible_runner.run(
        private_data_dir=str(data), playbook="play.yml", extravars=allvars, quiet=True,
        envvars=dict({"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_NOCOLOR": "1"},
                     **({"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"} if os.environ.get("BENCH_PROFILE") else {})))
    result.text = result.stdout.read()
    result.flat = " ".join(result.text.split())
    return result


def decode_entry(report, name):
    return next(d for d in report["decode"] if d["name"] == name)


def expected(k):
    return speed_model.SpeedModel(k, {"LAGUNA_STANDIN_TOKENS_PER_S": str(TOKENS_PER_S),
                                      "LAGUNA_STANDIN_ACCEPTANCE_PER_POS": RECIPE_POS}).expected()


def test_the_sweep_report_and_restore_against_the_speed_model(node):
    """Baseline, k=6 and a k=4 that dies at start, with k=2 configured: the
    sweep goes on past the failure, restores k=2, measures TTFT there, and
    the report, JSON and plots hold the speed model's figures. The server
    wants an API key (vllm_serve_api_key): every request sends it, and it
    shows nowhere."""
    node.vllm(broken_k=4)
    result = run_benchmark(
        node, hostvars="vllm_serve_num_speculative_tokens=2", vllm_serve_api_key=API_KEY,
        vllm_serve_warmup_requests=1, vllm_serve_warmup_max_tokens=16,
        benchmark_k_values=[6, 4], benchmark_runs=3, benchmark_warmup=1, benchmark_prompt_tokens=512,
        benchmark_max_tokens=96, benchmark_ttft_prompt_tokens=[1024, 4096, 16384], benchmark_ttft_runs=2,
        benchmark_greedy_prompts=["Write a CSV parser.", "Implement an LRU cache."], benchmark_greedy_max_tokens=24)
    # The failed step fails the play at its end, after the report.
    assert result.rc != 0
    assert "k=4 failed:" in result.flat and "stopped right after starting" in result.flat
    assert "The benchmark had failures" in result.flat
    # Progress, one line per configuration in order.
    assert result.flat.index("no draft: ") < result.flat.index("k=6: ") < result.flat.index("k=4 failed:")
    assert "[1/3]" in result.flat and "[3/3]" in result.flat

    # Each configuration was a start of its own; then the configured k=2 came back.
    starts = [c for c in node.systemd()["calls"] if c[0] == "systemd-run"]
    specs = [json.loads(c[c.index("--speculative-config") + 1])["num_speculative_tokens"]
             if "--speculative-config" in c else None for c in starts]
    assert specs == [None, 6, 4, 2]
    unit = node.systemd()["units"]["laguna-vllm.service"]
    assert unit["pid"] and unit["state"] == "active"
    metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % node.port, timeout=5).read().decode()
    assert 'position="1"' in metrics and 'position="2"' not in metrics  # k=2 serves on
    # It serves with the key: /v1 wants it (so the sweep above sent it everywhere).
    models = "http://127.0.0.1:%d/v1/models" % node.port
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(models, timeout=5)
    assert refused.value.code == 401
    keyed = urllib.request.Request(models, headers={"Authorization": "Bearer " + API_KEY})
    assert json.loads(urllib.request.urlopen(keyed, timeout=5).read())["data"][0]["id"]

    results = node.tmp / "results"
    report = json.loads((results / "results.json").read_text())
    assert report["schema"] == "laguna.spark.benchmark/1" and report["standin"]
    assert report["configured"] == {"speculative": True, "k": 2}
    assert [d["name"] for d in report["decode"]] == ["no draft", "k=4", "k=6"]
    assert [f["step"] for f in report["failures"]] == ["k=4"]
    assert "stopped right after starting" in report["failures"][0]["error"]
    base = decode_entry(report, "no draft")
    assert base["tok_s"]["n"] == 3 and base["prompt_tokens"] == 512 and base["prompt_exact"]
    assert base["tok_s"]["median"] == pytest.approx(TOKENS_PER_S, rel=0.12)
    assert base["spec"]["acceptance_rate"] is None
    entry, model = decode_entry(report, "k=6"), expected(6)
    spec = entry["spec"]
    assert spec["draft_tokens"] == 6 * spec["drafts"] and spec["drafts"] >= 3 * 18
    assert spec["per_position"] == pytest.approx(model["per_position"], abs=0.1)
    assert spec["acceptance_rate"] == pytest.approx(model["acceptance_rate"], abs=0.07)
    # decode tok/s = tokens per step / step time of the speed model.
    assert entry["tok_s"]["median"] == pytest.approx((1 + spec["accepted_per_draft"]) / model["step_s"], rel=0.12)
    assert entry["speedup"] == pytest.approx(entry["tok_s"]["median"] / base["tok_s"]["median"])
    assert report["best_k"] == 6

    ttft = {t["target_prompt_tokens"]: t for t in report["ttft"]}
    for length in (1024, 4096):
        assert ttft[length]["exact"] and ttft[length]["prompt_tokens"] == length
        assert ttft[length]["ttft_s"]["n"] == 2
        assert length / PREFILL_TOKENS_PER_S <= ttft[length]["ttft_s"]["min"] < length / PREFILL_TOKENS_PER_S + 0.1
    assert ttft[16384]["skipped"] and "exceed the served context of 8192 tokens" in ttft[16384]["msg"]

    identity = report["identity"]
    assert identity["all_identical"] and [c["name"] for c in identity["configs"]] == ["k=6"]
    assert [p["tokens"] for p in identity["configs"][0]["prompts"]] == [24, 24]

    (mem,) = report["memory"]
    total_kb = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
    assert mem["host"] == "localhost" and mem["role"] == "head" and mem["total_bytes"] == total_kb * 1024
    assert 0 < mem["used_gib"] < mem["total_gib"]
    logged = [line for line in node.server_log().splitlines()
              if "GPU KV cache size" in line or "Maximum concurrency for" in line or "Kernel for" in line]
    assert report["vllm_log"]["lines"] == logged[-12:]

    # The Markdown: the stand-in says so first, the recipe beside the run.
    text = (results / "report.md").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("**STAND-IN RUN, not a measurement of Laguna-S 2.1:**")
    assert "| figure | recipe | this run (stand-in) |" in lines
    row = next(line for line in lines if line.startswith("| decode tok/s, k=6, 2048-token prompt |")).split(" | ")
    assert row[1] == "60.9" and row[2].startswith("%.1f (" % entry["tok_s"]["median"])
    assert "| TTFT at 2K | 0.7 s | not measured |" in lines
    assert any(line.startswith("| 16,384 | skipped: ") for line in lines)
    assert any(line.startswith("| k=4 | failed: ") for line in lines)
    assert "All identical." in text
    # The key is in none of the run's output, the JSON or the report.
    for where, content in (("the output", result.text), ("results.json", (results / "results.json").read_text()),
                           ("report.md", text)):
        assert API_KEY not in content, "the API key is in %s" % where

    # The plots: PNGs whose embedded data is the report's.
    data = bench_report.plot_data(report)
    for name in bench_report.PLOTS:
        image = Image.open(results / (name + ".png"))
        assert image.format == "PNG"
        assert json.loads(image.text["Description"]) == json.loads(json.dumps(data[name], sort_keys=True))
    tok = json.loads(Image.open(results / "tok_s_vs_k.png").text["Description"])["series"][0]
    assert tok["x"] == [0, 6] and tok["y"] == [base["tok_s"]["median"], entry["tok_s"]["median"]]
    accept = json.loads(Image.open(results / "acceptance_by_position.png").text["Description"])["series"]
    assert accept[0]["label"] == "this run (stand-in), k=6"
    assert accept[0]["y"] == pytest.approx(model["per_position"], abs=0.1)
    ttft_plot = json.loads(Image.open(results / "ttft_vs_prompt.png").text["Description"])["series"][0]
    assert ttft_plot["x"] == [1024, 4096]


def _bench_modules():
    """PIDs of vllm_bench module processes (the AnsiballZ wrapper and the module it runs), and not
    of other programs that name the module's file (ansible-test's validate-modules, an editor)."""
    return [pid for pid, argv in procs.argvs()
            if any("AnsiballZ_vllm_bench" in arg or "ansible_vllm_bench_payload" in arg for arg in argv)]


def test_ctrl_c_during_the_sweep_leaves_no_benchmark_running_and_the_rerun_restores(node):
    """Ctrl-C (twice) while the sweep measures: no request loop goes on
    without the playbook, and the rerun finishes and restores the configured
    k=2 (the interrupted run had restarted vLLM without the draft)."""
    small = dict(vllm_serve_warmup_requests=1, vllm_serve_warmup_max_tokens=16, benchmark_k_values=[6],
                 benchmark_runs=2, benchmark_warmup=1, benchmark_prompt_tokens=512, benchmark_max_tokens=96,
                 benchmark_ttft_prompt_tokens=[1024], benchmark_ttft_runs=1,
                 benchmark_greedy_prompts=["Write a CSV parser."], benchmark_greedy_max_tokens=24)
    hostvars = "vllm_serve_num_speculative_tokens=2"
    log = interrupt.interrupted_play(node.tmp, "- ansible.builtin.import_playbook: laguna.spark.benchmark\n",
                                     benchmark_vars(node, **small), _bench_modules, hostvars=hostvars,
                                     what="the vllm_bench module")
    starts = [c for c in node.systemd()["calls"] if c[0] == "systemd-run"]
    assert starts and "--speculative-config" not in starts[-1], log[-3000:]  # the sweep's baseline ran
    deadline = time.time() + 10
    while _bench_modules() and time.time() < deadline:
        time.sleep(0.2)
    assert not _bench_modules(), "a benchmark module outlived the interrupted playbook"
    result = run_benchmark(node, hostvars=hostvars, **small)
    assert result.rc == 0, result.flat[-3000:]
    last = [c for c in node.systemd()["calls"] if c[0] == "systemd-run"][-1]
    assert json.loads(last[last.index("--speculative-config") + 1])["num_speculative_tokens"] == 2
    assert node.systemd()["units"]["laguna-vllm.service"]["state"] == "active"
