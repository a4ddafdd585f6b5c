"""The frame of the probe_*.py scripts here, which run in the conformance venv (_conformance.run_in_venv): the
request is JSON on stdin, the report one JSON line on stdout.

vLLM and Ray log to stdout: run() keeps the real stdout for the report alone and sends the rest to stderr.
"""

import json
import os
import sys
import traceback

# What the vLLM probes set unless the caller did: no usage statistics.
VLLM_QUIET = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# Nothing fetched from the Hub either.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(report, environ=None):
    """Write ``report(request)`` (a dict) as the report, with ``environ`` set beforehand where os.environ lacks it."""
    for name, value in (environ or {}).items():
        os.environ.setdefault(name, value)
    request = json.load(sys.stdin)
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    result = report(request)
    json.dump(result, real_stdout, default=str)
    real_stdout.write("\n")
    real_stdout.flush()


def error(exc):
    """What a report says of an exception: its type, its message and the end of its traceback."""
    return "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc()[-4000:])
