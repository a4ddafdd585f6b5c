"""Call the collection's filter plugins as Ansible does, in a Python of their own.

Importing a controller plugin (ansible.errors) switches module warnings to the
controller's display for the rest of the process, which the in-process module
tests rely on not happening; so the calls run in a subprocess (one per
run_filter or run_filters call). The logic of each filter lives in
module_utils and is tested in-process; these calls test the filter itself
(its name, its arguments, its errors).
"""
import json
import subprocess
import sys
import textwrap

from helpers.collection import collections_path

_SCRIPT = textwrap.dedent("""
    import importlib, json, sys
    sys.path.insert(0, sys.argv[1])
    out = []
    for call in json.loads(sys.stdin.read()):
        plugin = importlib.import_module("ansible_collections.laguna.spark.plugins.filter." + call["plugin"])
        function = plugin.FilterModule().filters()[call["name"]]
        try:
            out.append(function(*call.get("args", []), **call.get("kwargs", {})))
        except Exception as exc:  # pylint: disable=broad-except
            out.append("%s: %s" % (type(exc).__name__, exc))
    print(json.dumps(out))
    """)


def _run(calls):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, collections_path()],
                          input=json.dumps(calls), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def run_filter(plugin, name, calls):
    """[result or "ErrorClass: message"] of filter ``name`` (in plugins/filter/<plugin>.py) for each
    call, a list of positional arguments or {"args": [...], "kwargs": {...}}."""
    return _run([dict(call if isinstance(call, dict) else {"args": list(call)}, plugin=plugin, name=name)
                 for call in calls])


def run_filters(calls):
    """[(filter name, [args])] of filters that each live in a plugin file of their own name ->
    [its result, or "ErrorClass: message"], in order, in one subprocess."""
    return _run([{"plugin": name, "name": name, "args": list(args)} for name, args in calls])
