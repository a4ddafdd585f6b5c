"""Run the collection's filter plugins in a Python of their own.

Importing a controller plugin (ansible.errors) switches module warnings to
the controller's display for the rest of the process, which the in-process
module tests rely on; so the unit tests call filters through this.
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
    for name, args in json.loads(sys.stdin.read()):
        plugin = importlib.import_module("ansible_collections.laguna.spark.plugins.filter." + name)
        try:
            out.append(plugin.FilterModule().filters()[name](*args))
        except Exception as exc:  # pylint: disable=broad-except
            out.append("%s: %s" % (type(exc).__name__, exc))
    print(json.dumps(out))
    """)


def run_filters(calls):
    """[(filter name, [args])] -> [its result, or "ErrorType: message"], in order."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, collections_path()], input=json.dumps(calls),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)
