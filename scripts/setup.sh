#!/usr/bin/env bash
# Install everything the collection and its tests need on a Debian machine
# (run as root): podman with runc, debootstrap, rsync, sshd and netplan for the
# tests, a Python venv with the pinned requirements in .venv, the cached test
# venvs (real vLLM 0.25.1 + Ray 2.60 for the conformance tests, the real `hf`),
# the package index and image of the molecule nodes, and the collection built
# and installed as users install it. Every step is skipped when already done.
#
# What runs at once (2 cores): .venv and then the nodes' package index
# (scripts/node-index.sh, run by .venv's python) in the foreground, while two
# background lanes work, each one step at a time, so that at most three steps
# run together and most of what they do is downloading:
#   lane 1, from the start: the conformance venv, then the hf venv;
#   lane 2, from the start: the node image (debootstrap and apt in a chroot);
#           once it and the package index are done, the molecule nodes have
#           all they need (LAGUNA_SETUP_NODES_READY below), and the lane goes
#           on with the draft-quantization venv (scripts/draft-quant-venv.sh).
# Each background step logs to .cache/<step>.log; a failed one shows the tail
# of its log and fails the set-up. LAGUNA_SETUP_COLLECTION=no leaves the
# collection build to the caller (scripts/test.sh builds it once per run).
# LAGUNA_SETUP_NODES_READY=FILE: write FILE as soon as .venv, the package
# index and the node image are there (scripts/test.sh starts molecule then,
# while the set-up finishes the test venvs).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(podman runc netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs
          debootstrap rsync openssh-client openssh-server netplan.io python3 python3-venv python3-pip
          ca-certificates nftables
          # perftest: the real ib_write_bw, whose parser the stand-in is checked against
          # (tests/conformance/test_hardware_doubles.py); it runs without RDMA devices up to looking for one.
          perftest)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# podman reads the project's own containers.conf (CONTAINERS_CONF; scripts/
# podman-env.sh), never /etc/containers/containers.conf, which belongs to the
# machine's other users: runc, because crun fails on this kind of host's hybrid
# cgroups; lowered ulimits, because raising them is not permitted here.
. scripts/podman-env.sh

mkdir -p .cache
setup_start=$(date +%s)
# One background step: its output in .cache/NAME.log, its tail on failure.
step() {
  local name=$1 begin
  shift
  begin=$(date +%s)
  if ! "$@" > ".cache/$name.log" 2>&1; then
    echo "setup: $name failed ($*); the end of .cache/$name.log:" >&2
    tail -n 30 ".cache/$name.log" >&2
    return 1
  fi
  echo "setup: $name $(($(date +%s) - begin)) s (done $(($(date +%s) - setup_start)) s after the lanes started)"
}
lanes=()
# On failure, end the lanes still running: each is a process group of its own.
stop_lanes() {
  local pid
  for pid in "${lanes[@]}"; do
    kill -- "-$pid" 2>/dev/null || true
  done
}
trap 'rc=$?; [ "$rc" -eq 0 ] || stop_lanes' EXIT
set -m  # the lanes get process groups of their own (stop_lanes)
( step conformance-venv bash scripts/conformance-venv.sh &&
  step hf-venv bash scripts/hf-venv.sh ) &
lanes+=($!)
set +m

set -m
( step node-image bash scripts/build-node-image.sh ) &
image_lane=$!
lanes+=($image_lane)
set +m

venv_start=$(date +%s)
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! cmp -s requirements.txt .venv/.requirements.installed; then
  .venv/bin/pip install --quiet -r requirements.txt
  cp requirements.txt .venv/.requirements.installed
fi
echo "setup: .venv $(($(date +%s) - venv_start)) s"

step node-index env PYTHON="$PWD/.venv/bin/python" bash scripts/node-index.sh
if [ "${LAGUNA_SETUP_COLLECTION:-yes}" != no ]; then
  # The collection as users install it, where ansible.cfg and molecule look.
  bash scripts/collection.sh >/dev/null
fi
wait "$image_lane" || exit 1
if [ -n "${LAGUNA_SETUP_NODES_READY:-}" ]; then
  : > "$LAGUNA_SETUP_NODES_READY"
fi

set -m
( step draft-quant-venv env PYTHON="$PWD/.venv/bin/python" bash scripts/draft-quant-venv.sh ) &
lanes+=($!)
set +m

failed=0
for pid in "${lanes[@]}"; do
  [ "$pid" != "$image_lane" ] || continue  # waited for above
  wait "$pid" || failed=1
done
[ "$failed" -eq 0 ] || exit 1
echo "setup done: activate with  . .venv/bin/activate"
