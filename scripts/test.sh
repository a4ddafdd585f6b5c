#!/usr/bin/env bash
# The whole test suite: setup, the lint gates, unit, integration and
# conformance tests (pytest), and the molecule scenario (converge from bare
# nodes, idempotence, check mode, testinfra, side effects with the benchmark
# and the fault suites), all against the collection as built and installed by
# scripts/collection.sh. Each phase prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
phase() { echo "== $1 ($(( $(date +%s) - start )) s since start)"; }

phase setup
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
. scripts/podman-env.sh

phase lint
bash scripts/lint.sh

# Build the tarball and install it into a fresh collections path
# (.cache/collections, where molecule.yml and ansible.cfg look).
phase pytest
LAGUNA_COLLECTIONS_PATH="$(bash scripts/collection.sh)"
export LAGUNA_COLLECTIONS_PATH
# The unit tests run in their own process: they run modules in-process, and
# AnsibleModule's warnings come back empty once ansible-core has been loaded
# by the integration tests in the same interpreter.
pytest -q --durations=10 tests/unit
pytest -q --durations=25 tests/integration tests/conformance

phase molecule
molecule test --all
phase finished
