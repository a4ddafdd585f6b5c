"""What monitoring adds to the test command, read from one run's own logs.

Issue 22 asks that monitoring add less than 4 minutes to the test command.
Timing two whole runs (with and without it) on this shared machine measures
mostly the machine, so this reads the one run it is given instead:

- .cache/molecule.log (scripts/test.sh writes it, each line with the time it
  was written): the seconds of every task of the monitoring role in each
  molecule step (check on fresh nodes, converge, idempotence, check on
  converged nodes, the side effect), and of the teardown's tasks that remove
  what it added, each task lasting until the next task or recap starts;
- .cache/measurements/faults.log (the fault suite's pytest --durations=0):
  the seconds of every test of faults/test_monitoring.py (setup, call and
  teardown) and of the intruder's node exporter test.

It does not see what monitoring costs beside its own tasks and tests: Ray's
full agents (`ray[default]`) and the daemons running on both nodes while
every other step runs. The JSON it prints (and writes with --out) says so.

Usage: python3 scripts/monitoring_test_cost.py [--molecule-log F]
       [--faults-log F] [--out F]
"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) (.*)$")
STEP = re.compile(r"default\s*➜\s*(\w+):\s*Executing$")
TASK = re.compile(r"\bTASK \[([^\]]*)")
RECAP = re.compile(r"\bPLAY RECAP\b")
DURATION = re.compile(r"^([0-9.]+)s (setup|call|teardown)\s+(\S+)$")
# The teardown's block that removes what the monitoring role added (its tasks' names are read from it).
TEARDOWN_TASKS = os.path.join(ROOT, "roles", "teardown", "tasks", "main.yml")
TEARDOWN_BLOCK = "Remove monitoring"
# The tests that exist for monitoring alone.
MONITORING_TESTS = re.compile(r"faults/test_monitoring\.py::|faults/test_intruder\.py::test_the_node_exporters_")
NOT_COUNTED = ("Ray's full agents (ray[default]: installing its wheels, its agents running) and the monitoring daemons "
               "running beside every other step, and verify.yml's reading of the alerts in each verify run")


def _seconds(hours, minutes, secs):
    return int(hours) * 3600 + int(minutes) * 60 + int(secs)


def teardown_task_names(path=TEARDOWN_TASKS):
    """The names, as the log shows them, of the tasks in the teardown's block that removes monitoring."""
    import yaml  # the test venv's (PyYAML, with ansible-core)
    with open(path, encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    block = [t for t in tasks if t.get("name") == TEARDOWN_BLOCK]
    if len(block) != 1:
        raise ValueError("%s: no single block named %r" % (path, TEARDOWN_BLOCK))
    return {"laguna.spark.teardown : " + t["name"] for t in block[0]["block"]}


def task_seconds(lines, teardown_names=frozenset()):
    """{step: seconds} of the monitoring role's tasks and of the teardown's tasks named in
    ``teardown_names``, per molecule step (a step named twice, like check, counts as step, step#2)."""
    events = []  # (time, step, task name or None for a recap)
    step, seen, day = "", {}, 0
    last = None
    for raw in lines:
        match = LINE.match(ANSI.sub("", raw.rstrip("\n")))
        if not match:
            continue
        now = _seconds(*match.group(1, 2, 3))
        if last is not None and now < last:  # past midnight
            day += 86400
        last = now
        now += day
        text = match.group(4)
        named = STEP.search(text)
        if named:
            seen[named.group(1)] = seen.get(named.group(1), 0) + 1
            step = named.group(1) + ("" if seen[named.group(1)] == 1 else "#%d" % seen[named.group(1)])
            events.append((now, step, None))
            continue
        task = TASK.search(text)
        if task:
            events.append((now, step, task.group(1)))
        elif RECAP.search(text):
            events.append((now, step, None))
    totals = {}
    for (start, where, name), (end, _next_step, _next) in zip(events, events[1:]):
        # The log wraps a long task name: its first line is a prefix of the name.
        if name and (name.startswith("laguna.spark.monitoring : ")
                     or any(full.startswith(name.rstrip()) for full in teardown_names)):
            totals[where] = totals.get(where, 0) + (end - start)
    return totals


def test_seconds(lines):
    """{test: seconds} (setup + call + teardown) of the tests that exist for monitoring alone."""
    totals = {}
    for raw in lines:
        match = DURATION.match(raw.strip())
        if match and MONITORING_TESTS.search(match.group(3)):
            name = match.group(3).split("/faults/")[-1]
            totals[name] = round(totals.get(name, 0) + float(match.group(1)), 2)
    return totals


def cost(molecule_lines, faults_lines, teardown_names):
    tasks, tests = task_seconds(molecule_lines, teardown_names), test_seconds(faults_lines)
    total = sum(tasks.values()) + sum(tests.values())
    return {"tasks_s": tasks, "tests_s": tests, "total_s": round(total, 1), "limit_s": 240,
            "within_limit": total < 240, "not_counted": NOT_COUNTED}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--molecule-log", default=os.path.join(ROOT, ".cache", "molecule.log"))
    parser.add_argument("--faults-log", default=os.path.join(ROOT, ".cache", "measurements", "faults.log"))
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    with open(args.molecule_log, encoding="utf-8", errors="replace") as handle:
        molecule_lines = handle.readlines()
    with open(args.faults_log, encoding="utf-8", errors="replace") as handle:
        faults_lines = handle.readlines()
    result = cost(molecule_lines, faults_lines, teardown_task_names())
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
