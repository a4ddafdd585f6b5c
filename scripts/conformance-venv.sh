#!/usr/bin/env bash
# Build the conformance venv for tests/conformance: vLLM 0.25.1 and Ray 2.60.0 as
# real packages (CPU only, no CUDA wheels), from tests/conformance/requirements.txt.
#
#   scripts/conformance-venv.sh          # build if missing or stale, print its python
#
# Idempotent: the venv carries a stamp with the hash of the pins, the Python
# version and the machine; a matching stamp means nothing is done.  Location:
# $LAGUNA_CONFORMANCE_VENV, by default <repo>/.cache/conformance-venv.  Python:
# $LAGUNA_CONFORMANCE_PYTHON, by default python3 (3.10 to 3.14, as vLLM needs).
# It is a test tool only: nothing here goes into the node image.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements="$root/tests/conformance/requirements.txt"
venv="${LAGUNA_CONFORMANCE_VENV:-$root/.cache/conformance-venv}"
python="${LAGUNA_CONFORMANCE_PYTHON:-python3}"

"$python" -c 'import sys; assert (3, 10) <= sys.version_info[:2] < (3, 15), sys.version' \
  || { echo "conformance-venv: $python is not Python 3.10-3.14" >&2; exit 1; }

key=$( { cat "$requirements"; "$python" -c 'import sys; print(sys.version)'; uname -m; } \
       | sha256sum | cut -d' ' -f1)
stamp="$venv/.laguna-conformance-stamp"

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9  # one build at a time

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && "$venv/bin/python" -c 'import importlib.util as u; assert u.find_spec("vllm") and u.find_spec("ray")' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi

start=$(date +%s)
echo "conformance-venv: building $venv (pins $(echo "$key" | cut -c1-12))" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade 'pip>=24' >&2
# --no-deps: exactly the pinned set, so no CUDA libraries or triton come along.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --only-binary=:all: -r "$requirements" >&2
"$venv/bin/python" - >&2 <<'EOF'
import importlib.metadata as md
import ray, vllm, prometheus_client  # noqa: F401
assert md.version("vllm") == "0.25.1", md.version("vllm")
assert md.version("ray") == "2.60.0", md.version("ray")
EOF
echo "$key" > "$stamp"
echo "conformance-venv: built in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$venv/bin/python"
