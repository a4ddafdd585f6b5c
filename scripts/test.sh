#!/usr/bin/env bash
# The whole test suite: setup, the lint gates, unit, integration and
# conformance tests (pytest), and the molecule scenario (converge from bare
# nodes, idempotence, check mode, testinfra, side effects with the benchmark
# and the fault suites), all against the collection as built and installed by
# scripts/collection.sh, once per run.
#
# Two lanes after the set-up and the collection build: molecule (the longest
# phase, mostly waiting on services in its two containers) runs in the
# background, its output in .cache/molecule.log (printed when it ends), while
# the lint gates, the unit tests and the integration and conformance tests run
# one after the other in the foreground. A failed foreground phase stops
# molecule; a failed molecule fails the run once the foreground lane is done.
#
# Each phase prints when it starts; at the end, also when a phase fails, a
# table of each phase's start (seconds after the run started) and wall time
# is printed and written to .cache/measurements/test-times.json:
#   {"phases": {"setup": s, ...}, "starts": {"setup": s, ...},
#    "total_s": s, "commit": "<short sha>", "finished": "<ISO time>",
#    "ok": true|false}
# LAGUNA_PYTEST_WORKERS (default 2; 0 runs them in one process) is the
# number of pytest-xdist workers of the integration and conformance tests. LAGUNA_TEST_LANES=1 runs molecule after the foreground
# phases instead of beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
start=$(date +%s)
phases=()     # names, in order of their end
starts=()     # seconds after $start, same order
durations=()  # seconds, same order
current=""
current_start=$start
failed=""
molecule_pid=""
molecule_start=""
MOLECULE_LOG="$ROOT/.cache/molecule.log"

# End the running foreground phase (if any), start the next one (if named).
phase() {
  local now
  now=$(date +%s)
  if [ -n "$current" ]; then
    record "$current" "$current_start" "$now"
  fi
  current="${1:-}"
  current_start=$now
  if [ -n "$current" ]; then
    echo "== $current ($((now - start)) s since start)"
  fi
}

record() {  # name, start, end (epoch seconds)
  phases+=("$1")
  starts+=("$(($2 - start))")
  durations+=("$(($3 - $2))")
}

# Molecule in the background, in a process group of its own (setsid), so that
# stopping it stops everything it started.
molecule_begin() {
  molecule_start=$(date +%s)
  echo "== molecule, beside the next phases ($((molecule_start - start)) s since start; output in ${MOLECULE_LOG#"$ROOT"/})"
  mkdir -p "$(dirname "$MOLECULE_LOG")"
  rm -f "$MOLECULE_LOG.rc"
  # Each line of the log starts with the time it was written (molecule's
  # steps, the plays and the fault suite can be timed from it afterwards).
  setsid bash -c 'PYTHONUNBUFFERED=1 molecule test --all 2>&1 | while IFS= read -r line; do printf "%(%T)T %s\n" -1 "$line"; done > "$1"
                  echo "${PIPESTATUS[0]}" > "$1.rc"' molecule "$MOLECULE_LOG" &
  molecule_pid=$!
}

# Wait for molecule, show its output, record its phase; its exit status.
molecule_end() {
  local rc
  [ -n "$molecule_pid" ] || return 0
  echo "== waiting for molecule ($(($(date +%s) - start)) s since start)"
  wait "$molecule_pid" || true
  molecule_pid=""
  cat "$MOLECULE_LOG"
  record molecule "$molecule_start" "$(date +%s)"
  # What monitoring's own tasks and tests took in this run (issue 22's limit: 240 s).
  echo "== monitoring's share of molecule (.cache/measurements/monitoring-test-time.json)"
  "$ROOT/.venv/bin/python3" scripts/monitoring_test_cost.py \
    --out "$ROOT/.cache/measurements/monitoring-test-time.json" || true
  rc=$(cat "$MOLECULE_LOG.rc" 2>/dev/null || echo 1)
  if [ "$rc" != 0 ]; then
    failed=molecule
    echo "== molecule failed (rc=$rc)"
  fi
  return "$rc"
}

molecule_stop() {
  if [ -n "$molecule_pid" ]; then
    echo "== stopping molecule (a foreground phase failed); its output so far:"
    kill -TERM -- "-$molecule_pid" 2>/dev/null || true
    wait "$molecule_pid" 2>/dev/null || true
    molecule_pid=""
    tail -n 60 "$MOLECULE_LOG" 2>/dev/null || true
    record "molecule (stopped)" "$molecule_start" "$(date +%s)"
  fi
}

report() {
  local rc=$1 ok=true total i out json starts_json name
  [ "$rc" -eq 0 ] || ok=false
  if [ "$ok" = false ] && [ -z "$failed" ]; then
    failed="$current"
  fi
  phase
  molecule_stop
  if [ -n "${setup_pid:-}" ]; then
    kill -- "$setup_pid" 2>/dev/null || true
  fi
  total=$(($(date +%s) - start))
  out="$ROOT/.cache/measurements/test-times.json"
  echo
  echo "== test times (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown))"
  printf '%-26s %8s %8s\n' phase start seconds
  json=""
  starts_json=""
  for i in "${!phases[@]}"; do
    name="${phases[$i]}"
    printf '%-26s %8d %8d%s\n' "$name" "${starts[$i]}" "${durations[$i]}" \
      "$([ "$name" = "$failed" ] && [ "$ok" = false ] && echo '  FAILED')"
    json+="${json:+, }\"$name\": ${durations[$i]}"
    starts_json+="${starts_json:+, }\"$name\": ${starts[$i]}"
  done
  printf '%-26s %8s %8d  (%d min %02d s)\n' total "" "$total" "$((total / 60))" "$((total % 60))"
  mkdir -p "$(dirname "$out")"
  printf '{"phases": {%s}, "starts": {%s}, "total_s": %d, "commit": "%s", "finished": "%s", "ok": %s}\n' \
    "$json" "$starts_json" "$total" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$ok" > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "(written to ${out#"$ROOT"/})"
}
trap 'rc=$?; trap - EXIT; report "$rc" || true; exit "$rc"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

phase setup
# The collection is built once, below, for the tests and molecule alike.
# Molecule needs only .venv, the nodes' package index and image: in the lanes
# mode it starts once setup.sh says they are there (LAGUNA_SETUP_NODES_READY),
# and the set-up's test venvs finish beside it before the foreground phases.
nodes_ready="$ROOT/.cache/setup.nodes-ready"
mkdir -p "$ROOT/.cache"
rm -f "$nodes_ready"
LAGUNA_SETUP_COLLECTION=no LAGUNA_SETUP_NODES_READY="$nodes_ready" bash scripts/setup.sh &
setup_pid=$!
if [ "${LAGUNA_TEST_LANES:-2}" != 1 ]; then
  while [ ! -e "$nodes_ready" ] && kill -0 "$setup_pid" 2>/dev/null; do
    sleep 2
  done
fi
if [ ! -e "$nodes_ready" ] || [ "${LAGUNA_TEST_LANES:-2}" = 1 ]; then
  # The set-up ended (or failed) before the nodes were ready, or no lanes.
  wait "$setup_pid"
  setup_pid=""
fi
export PATH="$PWD/.venv/bin:$PATH"
. scripts/podman-env.sh

# Build the tarball and install it into a fresh collections path
# (.cache/collections, where molecule.yml and ansible.cfg look); the pytest
# runs (and each of their xdist workers) use this copy through
# LAGUNA_COLLECTIONS_PATH instead of building their own.
phase collection
LAGUNA_COLLECTIONS_PATH="$(bash scripts/collection.sh)"
export LAGUNA_COLLECTIONS_PATH

lanes="${LAGUNA_TEST_LANES:-2}"
foreground=()
if [ "$lanes" != 1 ]; then
  phase
  molecule_begin
  # The foreground's tests run in a PID namespace of their own (a fresh
  # /proc, with bash as its init to reap what the tests orphan): the
  # preflight tests stop every `vllm serve` this machine shows them outside
  # laguna-vllm.service, and must not see the molecule nodes' processes.
  # Whatever the tests leave running ends with the namespace. (CPU: the
  # kernel shares it between sessions, autogroup, so the foreground lane
  # gets one share beside molecule's controller and each node container's.)
  foreground=(unshare --pid --fork --mount-proc --kill-child
              bash -c '"$@"; rc=$?; exit "$rc"' foreground)
fi

# Beside molecule (the longest lane, so the run's length), the foreground
# lane yields the CPU: its session's autogroup (the kernel's CPU share of a
# session, /proc/self/autogroup) gets nice 10 for the lint gates and the
# integration tests, which finish long before molecule all the same; the unit
# tests, which time a few things, run at the usual share.
yield_cpu() {  # nice value of this session's autogroup
  if [ "$lanes" != 1 ] && [ -w /proc/self/autogroup ]; then
    echo "$1" > /proc/self/autogroup 2>/dev/null || true
  fi
}

if [ -n "$setup_pid" ]; then
  phase "setup (test venvs)"
  wait "$setup_pid"
  setup_pid=""
fi

phase lint
yield_cpu 10
"${foreground[@]}" bash scripts/lint.sh

phase unit
yield_cpu 0
# The unit tests run in their own process: they run modules in-process, and
# AnsibleModule's warnings come back empty once ansible-core has been loaded
# by the integration tests in the same interpreter.
"${foreground[@]}" pytest -q --durations=10 tests/unit

phase integration+conformance
# --dist loadgroup (with LAGUNA_PYTEST_WORKERS > 0): each test file runs whole
# on one worker, and the files that share state run on the same one
# (pytest.ini's xdist_groups, applied by tests/helpers/collection.py),
# longest first.
yield_cpu 10
workers="${LAGUNA_PYTEST_WORKERS:-2}"
xdist=()
if [ "$workers" != 0 ]; then
  xdist=(-n "$workers" --dist loadgroup)
fi
"${foreground[@]}" pytest -q --durations=25 "${xdist[@]}" tests/integration tests/conformance
yield_cpu 0
phase

if [ "$lanes" = 1 ]; then
  phase molecule
  molecule test --all
  phase
else
  molecule_end
fi
echo "== finished ($(($(date +%s) - start)) s since start)"
