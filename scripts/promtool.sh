#!/usr/bin/env bash
# Print the path of a promtool, the one of this host's distribution package
# `prometheus` (Debian bookworm: 2.42; Ubuntu noble: 2.45), fetched once.
#
#   bash scripts/promtool.sh                  # .cache/tools/prometheus-<version>/usr/bin/promtool
#   bash scripts/promtool.sh --prometheus     # the same package's prometheus (for tests on loopback)
#   bash scripts/promtool.sh --node-exporter  # prometheus-node-exporter's binary, fetched the same way
#   bash scripts/promtool.sh --version        # the package version only
#
# Nothing is installed: installing `prometheus` starts a server that listens
# on every address. `apt-get download` fetches the .deb into .cache/tools and
# `dpkg-deb -x` unpacks it beside it, once per package version (the candidate
# that apt-cache reports; a new candidate after an `apt-get update` gets its
# own directory). No promtool is no test: the script fails, saying why, and
# the tests that use it fail with it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${LAGUNA_TOOLS_DIR:-$root/.cache/tools}"

package=prometheus binary=usr/bin/promtool
case "${1:-}" in
  --prometheus) binary=usr/bin/prometheus ;;
  --node-exporter) package=prometheus-node-exporter binary=usr/bin/prometheus-node-exporter ;;
  --version|"") ;;
  *) echo "usage: $0 [--prometheus | --node-exporter | --version]" >&2; exit 2 ;;
esac

fail() { echo "promtool.sh: $*" >&2; exit 1; }
command -v apt-cache >/dev/null || fail "apt-cache not found: promtool comes from the distribution's package prometheus (Debian, Ubuntu)"
command -v dpkg-deb >/dev/null || fail "dpkg-deb not found (package dpkg)"

version="$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | head -n1)"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  fail "apt knows no package $package (run apt-get update, or add the distribution's main component)"
fi
if [ "${1:-}" = --version ]; then
  echo "$version"; exit 0
fi

dir="$tools/$package-${version//[^A-Za-z0-9.+~-]/_}"
path="$dir/$binary"
if [ -x "$path" ]; then
  echo "$path"; exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.promtool.lock"
flock 9
if [ ! -x "$path" ]; then
  work="$(mktemp -d "$tools/.$package.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download "$package=$version" >&2) ||
    fail "apt-get download $package=$version failed (is the package index reachable?)"
  deb="$(ls "$work"/"${package}"_*.deb)"
  dpkg-deb -x "$deb" "$work/root"
  [ -x "$work/root/$binary" ] || fail "$deb has no $binary"
  rm -rf "$dir"
  mv "$work/root" "$dir"
fi
echo "$path"
