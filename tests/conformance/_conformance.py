"""Shared by the conformance tests and their conftest (a unique module name: the
unit tests' conftest is also imported as `conftest`)."""

import ast
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(HERE, "models")
VENV_SCRIPT = os.path.join(ROOT, "scripts", "conformance-venv.sh")
# Accepted tokens of each k=6 draft fed to vLLM's metrics (test_vllm_metrics.py).
METRICS_DRAFTS = [6, 4, 3, 0, 5, 2, 6, 1, 3, 4]


def run_in_venv(python, script, payload=None, timeout=240, env=None):
    """Run one of the checker scripts here in the venv; returns its JSON report (last stdout line)."""
    proc = subprocess.run([python, os.path.join(HERE, script)], input=json.dumps(payload or {}),
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, **(env or {})))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError("%s failed (rc %d):\n%s\n%s" % (script, proc.returncode, proc.stdout[-3000:],
                                                             proc.stderr[-5000:]))
    return json.loads(lines[-1])


def model_paths(vars_):
    """Rendered model paths -> the stand-in config.json directories here."""
    return {vars_["laguna_model_path"]: os.path.join(MODELS, "Laguna-S-2.1-FP8"),
            vars_["laguna_draft_path"]: os.path.join(MODELS, "Laguna-S-2.1-DFlash-W4A16")}


def replace_value(argv, flag, value):
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def source_tree(package_dir, relpath):
    """The parsed source of ``relpath`` in an installed package (vLLM's, Ray's)."""
    path = os.path.join(package_dir, relpath)
    with open(path) as handle:
        return ast.parse(handle.read(), path)


def function(tree, name):
    """The first (async) function definition called ``name`` in ``tree``."""
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
