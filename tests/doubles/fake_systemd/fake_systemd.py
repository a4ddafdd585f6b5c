"""Fake `systemctl --user` / `systemd-run --user` / `journalctl` for unit tests.

Not executable itself: tests/unit/test_systemd_*.py put wrappers named after
each program on PATH that run it with FAKE_SYSTEMD_PROG set to that name.

State lives in the JSON file $FAKE_SYSTEMD_STATE: unit -> properties. A command
whose program is `false` "dies" at once (ActiveState=failed). Every call is
appended to state["calls"]. $FAKE_SYSTEMD_NO_MANAGER makes systemctl fail as it
does when the user has no manager. Unit files: `daemon-reload` loads every
*.service in $FAKE_SYSTEMD_UNIT_DIR (Description, FragmentPath; ExecStart kept
raw), `enable`/`disable` set UnitFileState, `start`/`restart` start them. The
molecule scenario uses the real systemd.
"""
import json
import os
import sys

NOT_FOUND = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success",
             "MainPID": "0", "ExecMainStatus": "0", "Environment": ""}


def show(units, unit, args):
    props = dict(units.get(unit, dict(NOT_FOUND, Description=unit)))
    wanted = [p for a in args if a.startswith("--property=") for p in a.split("=", 1)[1].split(",")]
    for name in wanted:
        props.setdefault(name, "")
    return "\n".join("%s=%s" % (k, v) for k, v in props.items() if not wanted or k in wanted)


def reload_units(units):
    directory = os.environ.get("FAKE_SYSTEMD_UNIT_DIR", "")
    files = sorted(f for f in os.listdir(directory) if f.endswith(".service")) if os.path.isdir(directory) else []
    for unit, props in list(units.items()):
        if props.get("FragmentPath") and unit not in files:
            if props["ActiveState"] == "active":
                props.update(LoadState="not-found", FragmentPath="", UnitFileState="")
            else:
                del units[unit]
    for name in files:
        path = os.path.join(directory, name)
        with open(path) as handle:
            lines = dict(line.split("=", 1) for line in handle.read().splitlines() if "=" in line)
        props = units.setdefault(name, dict(NOT_FOUND, UnitFileState="disabled"))
        props.update(LoadState="loaded", FragmentPath=path, Description=lines.get("Description", name).replace("%%", "%"),
                     ExecStart=lines.get("ExecStart", ""), Command=lines.get("ExecStart", "").split()[:1])


def main(state):
    prog, args = os.environ.get("FAKE_SYSTEMD_PROG") or os.path.basename(sys.argv[0]), sys.argv[1:]
    state["calls"].append([prog] + args)
    units = state["units"]
    if prog == "systemctl":
        if os.environ.get("FAKE_SYSTEMD_NO_MANAGER"):
            print("Failed to connect to bus: No such file or directory", file=sys.stderr)
            return 1
        args = [a for a in args if a != "--user"]
        verb = args[0]
        unit = next((a for a in args[1:] if not a.startswith("-")), "")
        if verb == "daemon-reload":
            reload_units(units)
        elif verb in ("enable", "disable"):
            if unit not in units or not units[unit].get("FragmentPath"):
                print("Failed to %s unit: Unit file %s does not exist." % (verb, unit), file=sys.stderr)
                return 1
            units[unit]["UnitFileState"] = "enabled" if verb == "enable" else "disabled"
        elif verb == "show":
            print(show(units, unit, args))
        elif verb == "stop":
            if unit in units:
                units[unit].update(ActiveState="inactive", SubState="dead", MainPID="0")
        elif verb in ("start", "restart"):
            if unit not in units:
                print("Failed to %s %s: Unit %s not found." % (verb, unit, unit), file=sys.stderr)
                return 5
            dead = units[unit].get("Command", [""])[0] == "false"
            units[unit].update(ActiveState="failed" if dead else "active", SubState="failed" if dead else "running",
                               Result="exit-code" if dead else "success", ExecMainStatus="1" if dead else "0",
                               MainPID="0" if dead else str(4000 + len(state["calls"])))
        elif verb == "reset-failed":
            if unit in units and units[unit]["ActiveState"] in ("inactive", "failed"):
                if units[unit].get("FragmentPath"):
                    units[unit].update(ActiveState="inactive", SubState="dead", Result="success")
                else:
                    del units[unit]
        elif verb == "status":
            print("%s - fake status" % unit)
    elif prog == "systemd-run":
        name = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
        desc = next((a.split("=", 1)[1] for a in args if a.startswith("--description=")), name)
        env = [a.split("=", 1)[1] for a in args if a.startswith("--setenv=")]
        command = args[args.index("--") + 1:]
        unit = name + ".service"
        if unit in units and units[unit]["ActiveState"] == "active":
            print("Failed to start transient service unit: Unit %s was already loaded" % unit, file=sys.stderr)
            return 1
        dead = command[0] == "false"
        units[unit] = {"LoadState": "loaded", "ActiveState": "failed" if dead else "active",
                       "SubState": "failed" if dead else "running", "Result": "exit-code" if dead else "success",
                       "MainPID": "0" if dead else str(4000 + len(state["calls"])), "Description": desc,
                       "ExecMainStatus": "1" if dead else "0",
                       "Environment": " ".join('"%s"' % e if " " in e else e for e in env),
                       "Command": command}
        print("Running as unit: %s" % unit, file=sys.stderr)
    elif prog == "journalctl":
        print("-- No entries --")
    return 0


if __name__ == "__main__":
    STATE_FILE = os.environ["FAKE_SYSTEMD_STATE"]
    if os.path.exists(STATE_FILE):
        with open(STATE_FILE) as handle:
            STATE = json.load(handle)
    else:
        STATE = {"units": {}, "calls": []}
    RC = main(STATE)
    with open(STATE_FILE, "w") as handle:
        json.dump(STATE, handle)
    sys.exit(RC)
