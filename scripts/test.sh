#!/usr/bin/env bash
# The whole test suite: the lint gates, then unit and ansible-runner
# integration tests and the molecule scenario (converge, idempotence,
# testinfra, side effects), all against the collection as built and installed
# by scripts/collection.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
. scripts/podman-env.sh
bash scripts/lint.sh
# Build the tarball and install it into a fresh collections path
# (.cache/collections, where molecule.yml and ansible.cfg look).
LAGUNA_COLLECTIONS_PATH="$(bash scripts/collection.sh)"
export LAGUNA_COLLECTIONS_PATH
pytest -q tests
molecule test --all
