#!/usr/bin/env bash
# The whole test suite: setup, the lint gates, unit, integration and
# conformance tests (pytest), and the molecule scenario (converge from bare
# nodes, idempotence, check mode, testinfra, side effects with the benchmark
# and the fault suites), all against the collection as built and installed by
# scripts/collection.sh, once per run. Each phase prints when it starts; at
# the end, also when a phase fails, a table of each phase's wall time is
# printed and written to .cache/measurements/test-times.json:
#   {"phases": {"setup": s, ...}, "total_s": s, "commit": "<short sha>",
#    "finished": "<ISO time>", "ok": true|false}
# LAGUNA_PYTEST_WORKERS (default 2) is the number of pytest-xdist workers of
# the integration and conformance tests; 0 runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
start=$(date +%s)
phases=()     # names, in order
durations=()  # seconds, same order
current=""
current_start=$start

# End the running phase (if any), start the next one (if named).
phase() {
  local now
  now=$(date +%s)
  if [ -n "$current" ]; then
    phases+=("$current")
    durations+=("$((now - current_start))")
  fi
  current="${1:-}"
  current_start=$now
  if [ -n "$current" ]; then
    echo "== $current ($((now - start)) s since start)"
  fi
}

report() {
  local rc=$1 ok=true total i out json name
  [ "$rc" -eq 0 ] || ok=false
  failed="$current"
  phase
  total=$(($(date +%s) - start))
  out="$ROOT/.cache/measurements/test-times.json"
  echo
  echo "== test times (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown))"
  printf '%-26s %8s\n' phase seconds
  json=""
  for i in "${!phases[@]}"; do
    name="${phases[$i]}"
    printf '%-26s %8d%s\n' "$name" "${durations[$i]}" "$([ "$name" = "$failed" ] && [ "$ok" = false ] && echo '  FAILED')"
    json+="${json:+, }\"$name\": ${durations[$i]}"
  done
  printf '%-26s %8d  (%d min %02d s)\n' total "$total" "$((total / 60))" "$((total % 60))"
  mkdir -p "$(dirname "$out")"
  printf '{"phases": {%s}, "total_s": %d, "commit": "%s", "finished": "%s", "ok": %s}\n' \
    "$json" "$total" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$ok" > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "(written to ${out#"$ROOT"/})"
}
trap 'rc=$?; trap - EXIT; report "$rc" || true; exit "$rc"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

phase setup
# The collection is built once, below, for the tests and molecule alike.
LAGUNA_SETUP_COLLECTION=no bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
. scripts/podman-env.sh

phase lint
bash scripts/lint.sh

# Build the tarball and install it into a fresh collections path
# (.cache/collections, where molecule.yml and ansible.cfg look); the pytest
# runs (and each of their xdist workers) use this copy through
# LAGUNA_COLLECTIONS_PATH instead of building their own.
phase collection
LAGUNA_COLLECTIONS_PATH="$(bash scripts/collection.sh)"
export LAGUNA_COLLECTIONS_PATH

phase unit
# The unit tests run in their own process: they run modules in-process, and
# AnsibleModule's warnings come back empty once ansible-core has been loaded
# by the integration tests in the same interpreter.
pytest -q --durations=10 tests/unit

phase integration+conformance
# Two workers (pytest-xdist): most of these tests wait on subprocesses.
# --dist loadgroup: each test file runs whole on one worker, and the files
# that share state run on the same one (pytest.ini's xdist_groups, applied by
# tests/helpers/collection.py), longest first.
workers="${LAGUNA_PYTEST_WORKERS:-2}"
xdist=()
if [ "$workers" != 0 ]; then
  xdist=(-n "$workers" --dist loadgroup)
fi
pytest -q --durations=25 "${xdist[@]}" tests/integration tests/conformance

phase molecule
molecule test --all
phase
echo "== finished ($(($(date +%s) - start)) s since start)"
