"""Time how long stopping the head raylet takes while vLLM serves (its TP
rank holds the head's GPU: the case of every restart of the cluster), with
Ray's and systemd's defaults, with the collection's settings before
ray_cluster_drain_timeout, and with the collection's defaults, in one run;
print the times and their ratios to the first.

    python3 scripts/raylet_stop_time.py [-i INVENTORY] [--rounds 1]

The settings: ``ray_systemd_defaults`` (Ray's 30 s SIGTERM drain, systemd's
TimeoutStopSec=90 and KillMode=control-group), ``drain_30_stop_20`` (the
collection's 20 s and mixed, with Ray's drain: every stop ran into the
timeout and was SIGKILLed) and ``collection_default`` (no drain, 20 s,
mixed). Run it on the converged molecule hosts (after `molecule converge`;
INVENTORY defaults to $MOLECULE_EPHEMERAL_DIRECTORY/inventory, and the nodes
are reached with `podman exec`, so it is for the test bed only). Each round,
for each setting: the site playbook's ray_cluster and vllm_serve roles run
with that setting (restarting the units, vLLM serving again), and `systemctl
--user stop laguna-ray-head` on the head is timed. At the end the roles run
once more with the inventory's settings, so the cluster serves again. Prints
one JSON object.

With ``--killed-head``, it times instead the repair of a SIGKILLed head raylet
(`--tags ray_cluster,vllm_serve`, the fault suite's case) with each
``--stop-timeouts`` value (default 20, the collection's, and 5, the molecule
scenario's), in turns: in the containers' cgroup v1 hierarchy, systemd waits
out the whole TimeoutStopSec after it has killed what a dead main process
left (the worker raylet, whose head is gone), so the value shows in the time.
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position

SETTINGS = {"ray_systemd_defaults": ["-e", "ray_cluster_drain_timeout=30", "-e", "laguna_stop_timeout=90",
                                     "-e", "laguna_kill_mode=control-group"],
            "drain_30_stop_20": ["-e", "ray_cluster_drain_timeout=30"],
            "collection_default": []}
USER_ENV = ["-u", "spark", "-e", "XDG_RUNTIME_DIR=/run/user/1000"]


def user_ctl(host, *args, timeout=300):
    argv = ["podman", "exec"] + USER_ENV + [host, "systemctl", "--user"] + list(args)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr


def converge(inventory, extra):
    rc, _changed, out, seconds = noop_ratio.play(inventory, "laguna.spark.site", "--tags", "ray_cluster,vllm_serve",
                                                 *extra, timeout=1800)
    if rc != 0:
        raise SystemExit("the roles failed (%s):\n%s" % (" ".join(extra) or "defaults", out[-3000:]))
    return seconds


def one_stop(head):
    rc, seconds, out = user_ctl(head, "stop", "laguna-ray-head.service")
    if rc != 0:
        raise SystemExit("stopping the head raylet failed: %s" % out)
    return round(seconds, 1)


def killed_head_repairs(inventory, head, timeouts, rounds):
    """{timeout: [seconds of each repair]} of a SIGKILLed head raylet, the
    timeouts taken in turns, each round."""
    seconds = {str(t): [] for t in timeouts}
    for _round in range(rounds):
        for timeout in timeouts:
            extra = ["-e", "laguna_stop_timeout=%d" % timeout]
            converge(inventory, extra)
            rc, _seconds, out = user_ctl(head, "kill", "--signal=SIGKILL", "laguna-ray-head.service")
            if rc != 0:
                raise SystemExit("killing the head raylet failed: %s" % out)
            seconds[str(timeout)].append(round(converge(inventory, extra), 1))
    return seconds


def summary(key, seconds, first, ratio_key):
    """One JSON object: the times under ``key``, their medians, and each
    median's ratio to that of ``first``."""
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return json.dumps({key: seconds, "median": medians,
                       ratio_key: {name: round(value / medians[first], 3) for name, value in medians.items()}},
                      sort_keys=True)


def main():
    parser = noop_ratio.molecule_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--head", default="laguna-head")
    parser.add_argument("--killed-head", action="store_true")
    parser.add_argument("--stop-timeouts", type=int, nargs="+", default=[20, 5])
    args = parser.parse_args()
    rounds = max(1, min(args.rounds, 5))
    if args.killed_head:
        seconds = killed_head_repairs(args.inventory, args.head, args.stop_timeouts, rounds)
        converge(args.inventory, [])
        print(summary("repair_seconds", seconds, str(args.stop_timeouts[0]), "ratio_to_first"))
        return
    seconds = {name: [] for name in SETTINGS}
    for _round in range(rounds):
        for name, extra in SETTINGS.items():
            converge(args.inventory, extra)
            seconds[name].append(one_stop(args.head))
    converge(args.inventory, [])
    print(summary("stop_seconds", seconds, "ray_systemd_defaults", "ratio_to_defaults"))


if __name__ == "__main__":
    main()
