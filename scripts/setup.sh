#!/usr/bin/env bash
# Install everything the collection and its tests need on a Debian machine
# (run as root): podman with runc, debootstrap, rsync, a Python venv with the
# pinned requirements in .venv, and the local node image for molecule.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null ||
   ! command -v runc >/dev/null || ! command -v iptables >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    podman runc netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs \
    debootstrap rsync openssh-client python3 python3-venv python3-pip ca-certificates >/dev/null
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

PYTHON="$PWD/.venv/bin/python" bash scripts/build-node-image.sh
# The collection as users install it, where ansible.cfg and molecule look.
bash scripts/collection.sh >/dev/null
echo "setup done: activate with  . .venv/bin/activate"
