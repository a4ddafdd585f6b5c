"""Conformance with the real vLLM 0.25.1 and Ray 2.60.0 (see requirements.txt here).

The checks that need vLLM's or Ray's code run in the conformance venv that
scripts/conformance-venv.sh builds (cached under .cache/); it is built on first
use, and a venv that cannot be built fails the session rather than skipping it.
"""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _conformance import METRICS_DRAFTS, VENV_SCRIPT, model_paths, replace_value, run_in_venv  # noqa: E402
from helpers.collection import collections_path  # noqa: E402

collections_path()  # ansible_collections.laguna.spark: the installed copy


@pytest.fixture(scope="session")
def vllm_python():
    """Path of the conformance venv's python (vLLM 0.25.1, Ray 2.60.0)."""
    proc = subprocess.run(["bash", VENV_SCRIPT], capture_output=True, text=True, timeout=1500, check=False)
    if proc.returncode != 0:
        pytest.fail("scripts/conformance-venv.sh could not build the conformance venv:\n"
                    + proc.stderr[-4000:], pytrace=False)
    python = proc.stdout.strip().splitlines()[-1]
    assert os.access(python, os.X_OK), python
    return python


@pytest.fixture(scope="session")
def vllm_src(vllm_python):
    """The installed vllm package directory inside the conformance venv."""
    out = subprocess.run(
        [vllm_python, "-c", "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"],
        capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert os.path.isfile(os.path.join(out, "version.py")), out
    return out


@pytest.fixture(scope="session")
def ray_bin(vllm_python):
    return os.path.join(os.path.dirname(vllm_python), "ray")


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """What the collection renders for inventory/sparks (tests/helpers/render.py)."""
    from helpers.render import render_default_deployment
    return render_default_deployment(str(tmp_path_factory.mktemp("render")))


@pytest.fixture(scope="session")
def head(rendered):
    return rendered["hosts"][rendered["head"]]


@pytest.fixture(scope="session")
def workers(rendered):
    return [rendered["hosts"][name] for name in rendered["workers"]]


@pytest.fixture(scope="session")
def vllm_probe(vllm_python, head):
    """probe_vllm_args.py's report on the rendered `vllm serve` (and on broken variants)."""
    argv = head["vllm_serve"]["argv"]
    paths = model_paths(head["vars"])
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    cases = {
        "rendered": {"argv": argv, "paths": paths, "metrics_drafts": METRICS_DRAFTS},
        # The checks can fail: a misspelt flag, and a misspelt speculative key.
        "bad_flag": {"argv": [a.replace("--kv-cache-memory-bytes", "--kv-cache-memory-bytez") for a in argv],
                     "paths": paths},
        # argparse takes an unambiguous prefix; the check reports it.
        "prefix_flag": {"argv": [a.replace("--kv-cache-memory-bytes", "--kv-cache-memory-byte") for a in argv],
                        "paths": paths},
        "bad_spec_key": {"argv": replace_value(argv, "--speculative-config", json.dumps(
            dict({k: v for k, v in spec.items() if k != "num_speculative_tokens"},
                 num_speculative_token=spec["num_speculative_tokens"]))), "paths": paths},
    }
    result = run_in_venv(vllm_python, "probe_vllm_args.py", {"cases": cases}, timeout=400)
    assert "setup_error" not in result, result["setup_error"]
    return result
