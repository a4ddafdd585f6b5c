#!/usr/bin/env bash
# The whole test suite: unit tests, the ansible-runner integration tests and
# the molecule scenario (converge, idempotence, testinfra, side effects).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
pytest -q tests
molecule test --all
