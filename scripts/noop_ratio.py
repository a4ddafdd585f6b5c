"""Time a no-op rerun of the site playbook against a bare gather-facts + ping
play on the same hosts, in one run, and print the ratio (issue goal: <= 3).

    python3 scripts/noop_ratio.py -i INVENTORY [--pings 3] [--check] [--verify] [--full]

Run it on a converged cluster: the molecule hosts after `molecule converge`
(INVENTORY defaults to $MOLECULE_EPHEMERAL_DIRECTORY/inventory) or real
Sparks (-i inventory/sparks). The ping play runs --pings times and its
median is the baseline, so a slow first connection does not flatter the
ratio. The site run is a complete one, so it takes the fast no-op path
(laguna_fast_noop, the laguna role's fast_path.yml) when nothing changed
since the last complete run. --full also times a no-op with every role's
checks (-e laguna_fast_noop=false), and counts that run's module calls
that reached each node, per role (full_node_calls); --check and --verify also time `site
--check` and the verify playbook against the same baseline. Prints one JSON object; exits 1 when the
site run fails or changes anything (then it was not a no-op).

The molecule fault suite (molecule/default/faults/test_faults.py) calls
measure() for its last rerun, so the test command records the ratio.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALLBACKS = os.path.join(ROOT, "tests", "helpers", "callbacks")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from helpers import role_events  # noqa: E402  pylint: disable=wrong-import-position

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
PING = """---
- name: Baseline - gather a minimal set of facts and ping
  hosts: "{{ laguna_head_group | default('spark_head') }}:{{ laguna_worker_group | default('spark_workers') }}"
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def log_play_time(playbook, args, seconds, rc):
    """With LAGUNA_PLAY_TIMES set (the fault suite's side effect sets it), append one JSON line per run
    to that file: the pytest test running it (PYTEST_CURRENT_TEST), the playbook, its arguments,
    seconds and rc, so that the suite's time can be read per play."""
    path = os.environ.get("LAGUNA_PLAY_TIMES")
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "playbook": playbook,
                                     "args": list(args), "seconds": round(seconds, 1), "rc": rc}) + "\n")


def play(inventory, playbook, *args, timeout=1800, env=None):
    """(rc, {host: changed}, output, seconds) of one ansible-playbook run
    (``env``: more environment variables)."""
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", inventory, playbook] + list(args),
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **(env or {})))
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    changed = {m.group(1): int(m.group(3)) for m in RECAP.finditer(out)}
    log_play_time(playbook, args, seconds, proc.returncode)
    return proc.returncode, changed, out, seconds


def task_events_env(path):
    """The environment that has ansible-playbook write each task result to
    ``path`` (tests/helpers/callbacks/task_events.py), beside the callbacks
    the configuration enables."""
    enabled = os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "")
    return {"ANSIBLE_CALLBACK_PLUGINS": CALLBACKS, "LAGUNA_TASK_EVENTS": path,
            "ANSIBLE_CALLBACKS_ENABLED": ",".join(filter(None, (enabled, "task_events")))}


def measure(inventory, pings=3, check=False, verify=False, site="laguna.spark.site", site_args=(), full=False):
    """Time the baseline and the no-op site run (and optionally --check and
    verify) in this one run; returns a dict with seconds, ratios and the site
    run's rc, changed counts and output tail."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        handle.write(PING)
        ping_book = handle.name
    try:
        baseline = []
        for _run in range(max(1, pings)):
            rc, _changed, out, seconds = play(inventory, ping_book)
            if rc != 0:
                raise RuntimeError("the ping play failed:\n" + out[-3000:])
            baseline.append(seconds)
    finally:
        os.unlink(ping_book)
    base = statistics.median(baseline)
    rc, changed, out, seconds = play(inventory, site, *site_args)
    result = {"ping_seconds": [round(s, 2) for s in baseline], "baseline_seconds": round(base, 2),
              "site_noop_seconds": round(seconds, 2), "site_noop_ratio": round(seconds / base, 2),
              "site_rc": rc, "site_changed": changed, "site_tail": out[-3000:]}
    if full:
        # Its task results are counted per role and node (full_node_calls):
        # the tests' callback writes them, role_events counts the calls that
        # reached a node.
        with tempfile.TemporaryDirectory() as events_dir:
            events = os.path.join(events_dir, "events.jsonl")
            frc, fchanged, fout, fseconds = play(inventory, site, "-e", "laguna_fast_noop=false", *site_args,
                                                 env=task_events_env(events))
            calls = role_events.node_calls(role_events.read(events))
        result.update(full_seconds=round(fseconds, 2), full_ratio=round(fseconds / base, 2), full_rc=frc,
                      full_changed=fchanged, full_tail=fout[-3000:], full_node_calls=calls)
    if check:
        crc, _changed, cout, cseconds = play(inventory, site, "--check", *site_args)
        result.update(check_seconds=round(cseconds, 2), check_ratio=round(cseconds / base, 2), check_rc=crc,
                      check_tail=cout[-2000:] if crc else "")
    if verify:
        vrc, _changed, vout, vseconds = play(inventory, "laguna.spark.verify")
        result.update(verify_seconds=round(vseconds, 2), verify_ratio=round(vseconds / base, 2), verify_rc=vrc,
                      verify_tail=vout[-2000:] if vrc else "")
    return result


def molecule_parser(doc):
    """The argument parser of a script that measures the converged hosts: described by the first
    paragraph of ``doc``, with -i/--inventory ($MOLECULE_EPHEMERAL_DIRECTORY/inventory by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("-i", "--inventory",
                        default=os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "."), "inventory"))
    return parser


def main(argv=None):
    parser = molecule_parser(__doc__)
    parser.add_argument("--pings", type=int, default=3)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--full", action="store_true", help="also time a no-op with every role's checks")
    args = parser.parse_args(argv)
    result = measure(args.inventory, args.pings, args.check, args.verify, full=args.full)
    noop = result["site_rc"] == 0 and not any(result["site_changed"].values())
    if args.full:
        noop = noop and result["full_rc"] == 0 and not any(result["full_changed"].values())
    if noop:
        result.pop("site_tail")
        result.pop("full_tail", None)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if noop else 1


if __name__ == "__main__":
    sys.exit(main())
