"""Time how long stopping a worker raylet takes after its head died, with
systemd's defaults (TimeoutStopSec=90, KillMode=control-group: the units as
the collection ran them before laguna_stop_timeout and laguna_kill_mode) and
with the collection's defaults (20 s, mixed), in one run, and print both and
their ratio.

    python3 scripts/raylet_stop_time.py [-i INVENTORY] [--rounds 1]

Run it on the converged molecule hosts (after `molecule converge`; INVENTORY
defaults to $MOLECULE_EPHEMERAL_DIRECTORY/inventory, and the nodes are
reached with `podman exec`, so it is for the test bed only). Each round, for
each setting: the site playbook's ray_cluster and vllm_serve roles run with
that setting (restarting the units), the head raylet is SIGKILLed (the slow
case: the worker raylet has lost its head), and `systemctl --user stop
laguna-ray-worker` on the worker is timed. At the end the roles run once more
with the inventory's settings, so the cluster serves again. Prints one JSON
object.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position

SETTINGS = {"systemd_default": ["-e", "laguna_stop_timeout=90", "-e", "laguna_kill_mode=control-group"],
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


def one_stop(head, worker):
    user_ctl(head, "kill", "--signal=SIGKILL", "laguna-ray-head.service")
    time.sleep(5)  # the worker raylet notices its head is gone
    rc, seconds, out = user_ctl(worker, "stop", "laguna-ray-worker.service")
    if rc != 0:
        raise SystemExit("stopping the worker raylet failed: %s" % out)
    return round(seconds, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("-i", "--inventory",
                        default=os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "."), "inventory"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--head", default="laguna-head")
    parser.add_argument("--worker", default="laguna-worker")
    args = parser.parse_args()
    seconds = {name: [] for name in SETTINGS}
    for _round in range(max(1, min(args.rounds, 5))):
        for name, extra in SETTINGS.items():
            converge(args.inventory, extra)
            seconds[name].append(one_stop(args.head, args.worker))
    converge(args.inventory, [])
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(json.dumps({"stop_seconds": seconds, "median": medians,
                      "ratio": round(medians["collection_default"] / medians["systemd_default"], 3)},
                     sort_keys=True))


if __name__ == "__main__":
    main()
