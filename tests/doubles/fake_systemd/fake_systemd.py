#!/usr/bin/env python3
"""Fake `systemctl --user` / `systemd-run --user` / `journalctl` for unit tests.

State lives in the JSON file $FAKE_SYSTEMD_STATE: unit -> properties. A command
whose program is `false` "dies" at once (ActiveState=failed). Every call is
appended to state["calls"]. The molecule scenarios use the real systemd.
"""
import json
import os
import sys

state_file = os.environ["FAKE_SYSTEMD_STATE"]
state = json.load(open(state_file)) if os.path.exists(state_file) else {"units": {}, "calls": []}
prog, args = os.path.basename(sys.argv[0]), sys.argv[1:]
state["calls"].append([prog] + args)
units = state["units"]
rc = 0
if prog == "systemctl":
    args = [a for a in args if a != "--user"]
    verb = args[0]
    unit = next((a for a in args[1:] if not a.startswith("-")), "")
    if verb == "show":
        props = units.get(unit, {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                                 "Result": "success", "MainPID": "0", "Description": unit, "ExecMainStatus": "0"})
        print("\n".join("%s=%s" % kv for kv in props.items()))
    elif verb == "stop":
        if unit in units:
            units[unit].update(ActiveState="inactive", SubState="dead", MainPID="0")
    elif verb == "reset-failed":
        if unit in units and units[unit]["ActiveState"] in ("inactive", "failed"):
            del units[unit]
    elif verb == "status":
        print("%s - fake status" % unit)
elif prog == "systemd-run":
    name = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
    desc = next((a.split("=", 1)[1] for a in args if a.startswith("--description=")), name)
    command = args[args.index("--") + 1:]
    unit = name + ".service"
    if unit in units and units[unit]["ActiveState"] == "active":
        print("Failed to start transient service unit: Unit %s was already loaded" % unit, file=sys.stderr)
        rc = 1
    else:
        dead = command[0] == "false"
        units[unit] = {"LoadState": "loaded", "ActiveState": "failed" if dead else "active",
                       "SubState": "failed" if dead else "running", "Result": "exit-code" if dead else "success",
                       "MainPID": "0" if dead else str(4000 + len(state["calls"])), "Description": desc,
                       "ExecMainStatus": "1" if dead else "0"}
        print("Running as unit: %s" % unit, file=sys.stderr)
elif prog == "journalctl":
    print("-- No entries --")
json.dump(state, open(state_file, "w"))
sys.exit(rc)
