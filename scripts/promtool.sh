#!/usr/bin/env bash
# Print the path of a promtool, the one of this host's distribution package
# `prometheus` (Debian bookworm: 2.42; Ubuntu noble: 2.45), fetched once.
#
#   bash scripts/promtool.sh            # prints .cache/tools/prometheus-<version>/usr/bin/promtool
#   bash scripts/promtool.sh --version  # prints the package version only
#
# The package is not installed: installing `prometheus` starts a server that
# listens on every address. `apt-get download` fetches the .deb into
# .cache/tools and `dpkg-deb -x` unpacks it beside it, once per package
# version (the candidate that apt-cache reports; a new candidate after an
# `apt-get update` gets its own directory). No promtool is no test: the
# script fails, saying why, and the tests that use it fail with it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${LAGUNA_TOOLS_DIR:-$root/.cache/tools}"

fail() { echo "promtool.sh: $*" >&2; exit 1; }
command -v apt-cache >/dev/null || fail "apt-cache not found: promtool comes from the distribution's package prometheus (Debian, Ubuntu)"
command -v dpkg-deb >/dev/null || fail "dpkg-deb not found (package dpkg)"

version="$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p' | head -n1)"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  fail "apt knows no package prometheus (run apt-get update, or add the distribution's main component)"
fi
if [ "${1:-}" = --version ]; then
  echo "$version"; exit 0
fi

dir="$tools/prometheus-${version//[^A-Za-z0-9.+~-]/_}"
promtool="$dir/usr/bin/promtool"
if [ -x "$promtool" ]; then
  echo "$promtool"; exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.promtool.lock"
flock 9
if [ ! -x "$promtool" ]; then
  work="$(mktemp -d "$tools/.prometheus.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download "prometheus=$version" >&2) ||
    fail "apt-get download prometheus=$version failed (is the package index reachable?)"
  deb="$(ls "$work"/prometheus_*.deb)"
  dpkg-deb -x "$deb" "$work/root"
  [ -x "$work/root/usr/bin/promtool" ] || fail "$deb has no usr/bin/promtool"
  rm -rf "$dir"
  mv "$work/root" "$dir"
fi
echo "$promtool"
