#!/usr/bin/env bash
# Throughput of the staging role's mirror (laguna.spark.model_mirror, N
# parallel rsync/ssh streams) against a raw parallel copy (N x ssh cat, same
# cipher, no compression, same files per stream) between the head and the
# first worker, measured in the same run; prints the ratio (goal >= 0.8).
#
#   bash scripts/bench-mirror.sh [-i INVENTORY] [-e bench_size_gb=4] [-e bench_streams=8] [...]
#
# INVENTORY defaults to the molecule scenario's (the two node containers, after
# `molecule converge`); any inventory with spark_head and spark_workers works,
# e.g. inventory/sparks for the real link. The generated tree lives in
# /tmp/laguna-bench-mirror on both nodes (the worker's copy is removed after).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${LAGUNA_VENV:-$ROOT/.venv}/bin"
# molecule keeps the scenario's inventory in its newest ephemeral directory.
newest="$(ls -dt "$HOME"/.ansible/tmp/molecule.*.default 2>/dev/null | head -n 1 || true)"
inventory="${MOLECULE_EPHEMERAL_DIRECTORY:-$newest}/inventory"
if [ "${1:-}" = "-i" ]; then inventory="$2"; shift 2; fi
collections="${LAGUNA_COLLECTIONS_PATH:-$(bash scripts/collection.sh "$(mktemp -d)/collections")}"
ANSIBLE_COLLECTIONS_PATH="$collections" ANSIBLE_STDOUT_CALLBACK=default ANSIBLE_CALLBACK_RESULT_FORMAT=json \
  "$BIN/ansible-playbook" -i "$inventory" scripts/bench-mirror.yml "$@" |
  tee /dev/stderr | grep -o 'BENCH [^"]*' | tail -1
