#!/usr/bin/env bash
# Install everything the collection and its tests need on a Debian machine
# (run as root): podman with runc, debootstrap, rsync, sshd and netplan for the
# tests, a Python venv with the pinned requirements in .venv, the cached test
# venvs (real vLLM 0.25.1 + Ray 2.60 for the conformance tests, the real `hf`),
# the package index and image of the molecule nodes, and the collection built
# and installed as users install it. Every step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(podman runc netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs
          debootstrap rsync openssh-client openssh-server netplan.io python3 python3-venv python3-pip
          ca-certificates)
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

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! cmp -s requirements.txt .venv/.requirements.installed; then
  .venv/bin/pip install --quiet -r requirements.txt
  cp requirements.txt .venv/.requirements.installed
fi

# The test venvs download and install while the node image builds.
mkdir -p .cache
bash scripts/conformance-venv.sh > .cache/conformance-venv.log 2>&1 &
conformance=$!
bash scripts/hf-venv.sh > .cache/hf-venv.log 2>&1 &
hf=$!

bash scripts/build-node-image.sh
PYTHON="$PWD/.venv/bin/python" bash scripts/node-index.sh >/dev/null
# The collection as users install it, where ansible.cfg and molecule look.
bash scripts/collection.sh >/dev/null

wait "$conformance" || { tail -n 30 .cache/conformance-venv.log; exit 1; }
wait "$hf" || { tail -n 30 .cache/hf-venv.log; exit 1; }
echo "setup done: activate with  . .venv/bin/activate"
