#!/usr/bin/env bash
# Build the collection the way a user gets it and install it into a fresh
# collections path: `ansible-galaxy collection build` (galaxy.yml's
# build_ignore keeps tests, venvs and caches out), then
# `ansible-galaxy collection install` of that tarball. Prints the collections
# path (the directory that holds ansible_collections/) on stdout, so:
#
#   export ANSIBLE_COLLECTIONS_PATH="$(bash scripts/collection.sh)"
#
# DEST defaults to .cache/collections; it is replaced as a whole, by renaming,
# so a reader never sees a half-installed copy.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${LAGUNA_VENV:-$ROOT/.venv}/bin"
DEST="${1:-$ROOT/.cache/collections}"
case "$DEST" in /*) ;; *) DEST="$ROOT/$DEST" ;; esac

mkdir -p "$(dirname "$DEST")"
work="$(mktemp -d "$(dirname "$DEST")/.collection.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$BIN/ansible-galaxy" collection build --force --output-path "$work/dist" "$ROOT" >&2
tarball="$(ls "$work"/dist/laguna-spark-*.tar.gz)"
# --offline: the collection depends on no other collection.
ANSIBLE_COLLECTIONS_PATH="$work/collections" \
  "$BIN/ansible-galaxy" collection install --offline --force -p "$work/collections" "$tarball" >&2
cp "$tarball" "$work/collections/"

if [ -e "$DEST" ]; then
  mv "$DEST" "$work/old"
fi
mv "$work/collections" "$DEST"
echo "$DEST"
