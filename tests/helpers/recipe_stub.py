"""Stub for the programs the recipe's shell blocks call (see recipe.py).

Usage (from a wrapper named after the program): recipe_stub.py NAME ARGS...
Appends {"prog", "argv", "host", "env"} to $RECIPE_STUB_LOG, where env holds
only the variables the recipe exported on top of the harness's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# ssh options that take a value (OpenSSH's getopt string, the ones with ':').
SSH_ARG_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")


def record(name, args):
    base = set(json.loads(os.environ.get("RECIPE_STUB_BASE_ENV", "[]")))
    env = {k: v for k, v in os.environ.items()
           if k not in base and not k.startswith("RECIPE_STUB_") and k not in ("PWD", "SHLVL", "_", "OLDPWD")}
    entry = {"prog": name, "argv": [name] + list(args),
             "host": os.environ.get("RECIPE_STUB_HOST", "local"), "env": env}
    with open(os.environ["RECIPE_STUB_LOG"], "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def ssh(args):
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        i += 2 if (len(opt) == 2 and opt[1] in SSH_ARG_OPTS) else 1
    host, command = args[i], " ".join(args[i + 1:])
    sysfs = json.loads(os.environ.get("RECIPE_STUB_SYSFS", "{}")).get(host)
    if sysfs:
        command = command.replace("/sys/class/infiniband", sysfs)
    env = dict(os.environ, RECIPE_STUB_HOST=host)
    return subprocess.run(["bash", "-c", command], env=env, check=False, timeout=60).returncode


def main():
    name, args = sys.argv[1], sys.argv[2:]
    record(name, args)
    if name == "ssh" and args:
        return ssh(args)
    if name == "curl":
        sys.stdout.write("{}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
