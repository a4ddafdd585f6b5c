#!/usr/bin/env bash
# Build the local podman image that stands in for a DGX Spark node in the
# molecule scenarios. No registry is reachable, so the image is made from a
# debootstrapped Debian rootfs and `podman import`ed.
#
# What it holds is what a freshly installed Spark has before this collection
# touches it: systemd as PID 1, sshd, rsync, Python with venv, and a service
# user `spark` (uid 1000) with no venv and no SSH keys. The venv role installs
# the venv at converge, from the package index scripts/node-index.sh builds
# (real Ray, huggingface_hub and ninja; stand-in vllm and torch). The
# hardware doubles (nvidia-smi, nvcc, fake RoCE sysfs, the Hub double) are not
# baked in: molecule's prepare step installs them, so they are visible in the
# scenario.
#
# Reuse: the image carries a label, laguna.build, with a hash of everything it
# is made from, and is rebuilt only when that hash changes: this script (which
# holds both package lists, INCLUDE and INSTALL below, the service user and
# the chroot steps), and the suite, architecture and mirror it is built for
# (LAGUNA_NODE_SUITE, LAGUNA_NODE_ARCH or this machine's, LAGUNA_NODE_MIRROR),
# and the image name. The script reads no other file. A newer point release
# of the suite does not change the hash: `podman rmi` the image to take it.
#   bash scripts/build-node-image.sh                    build unless up to date
#   bash scripts/build-node-image.sh --print-platform [ARCH]
#   bash scripts/build-node-image.sh --print-packages   INCLUDE, INSTALL, APT_REPO
#   bash scripts/build-node-image.sh --print-build-id   the hash, no build
set -euo pipefail

# Installed by debootstrap (--include). nftables: the firewall role runs
# `nft`, which Ubuntu 24.04 (a Spark's DGX OS) has by default.
INCLUDE=(python3 systemd systemd-sysv dbus sudo openssh-server nftables)
# Installed with apt inside the rootfs afterwards.
# python3-apt: Ansible's apt module (the monitoring role), as Ubuntu has it.
INSTALL=(dbus-user-session libpam-systemd rsync python3-venv procps iproute2 openssh-client ca-certificates python3-apt)
# Downloaded, not installed, into a local apt repository in the image
# (/opt/laguna-apt, with their dependencies the rootfs lacks): the nodes'
# only apt source, so that the monitoring role installs the distribution's
# packages at converge without the test bed reaching any other address.
APT_REPO=(prometheus prometheus-node-exporter)

# The node's architecture, from the machine that builds the image (Sparks are
# aarch64): "<debootstrap arch> <pip --platform options for manylinux wheels>".
node_platform() {
  local machine deb tag
  machine="$1"
  case "$machine" in
    x86_64 | amd64) deb=amd64 tag=x86_64 ;;
    aarch64 | arm64) deb=arm64 tag=aarch64 ;;
    *) echo "unsupported architecture: $machine (x86_64 or aarch64)" >&2; return 1 ;;
  esac
  echo "$deb --platform manylinux2014_$tag --platform manylinux_2_17_$tag --platform manylinux_2_28_$tag"
}

ARCH="${LAGUNA_NODE_ARCH:-$(uname -m)}"
if [ "${1:-}" = --print-platform ]; then
  # For tests/unit/test_build_node_image.py: the mapping alone, no build.
  node_platform "${2:-$ARCH}"
  exit
fi
if [ "${1:-}" = --print-packages ]; then
  echo "${INCLUDE[*]}"
  echo "${INSTALL[*]}"
  echo "${APT_REPO[*]}"
  exit
fi
# A plain assignment, so that an unsupported architecture stops the build here.
platform="$(node_platform "$ARCH")"
read -r DEB_ARCH _ <<<"$platform"

IMAGE="${LAGUNA_NODE_IMAGE:-localhost/laguna-spark-node:latest}"
SUITE="${LAGUNA_NODE_SUITE:-bookworm}"
MIRROR="${LAGUNA_NODE_MIRROR:-http://deb.debian.org/debian}"
NODE_USER=spark
NODE_UID=1000

build_id="$( (cat "${BASH_SOURCE[0]}"; echo "$IMAGE $SUITE $DEB_ARCH $MIRROR") | sha256sum | cut -c1-16)"
if [ "${1:-}" = --print-build-id ]; then
  echo "$build_id"
  exit
fi
if podman image exists "$IMAGE" &&
   [ "$(podman image inspect --format '{{ index .Labels "laguna.build" }}' "$IMAGE")" = "$build_id" ]; then
  echo "node image $IMAGE is up to date ($build_id)"
  exit 0
fi

work="$(mktemp -d /var/tmp/laguna-node.XXXXXX)"
cleanup() {
  for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== debootstrap $SUITE ($DEB_ARCH) into $work/rootfs"
debootstrap --variant=minbase --arch="$DEB_ARCH" \
  --include="$(IFS=,; echo "${INCLUDE[*]}")" \
  "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
  { tail -n 40 "$work/debootstrap.log"; exit 1; }

cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
mount -t proc proc "$work/rootfs/proc"
mount --rbind /dev "$work/rootfs/dev"

echo "== packages and the service user inside the rootfs"
chroot "$work/rootfs" /bin/bash -euo pipefail -s <<CHROOT
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
apt-get update -qq
apt-get install -y -qq --no-install-recommends ${INSTALL[*]} >/dev/null
useradd --create-home --uid ${NODE_UID} --shell /bin/bash ${NODE_USER}
chown -R ${NODE_USER}:${NODE_USER} /home/${NODE_USER}
# The local repository: the packages and what they need beyond the rootfs,
# indexed by apt-ftparchive (apt-utils is removed again afterwards).
apt-get install -y -qq --no-install-recommends apt-utils >/dev/null
apt-get clean
apt-get install -y -qq --no-install-recommends --download-only ${APT_REPO[*]} >/dev/null
mkdir -p /opt/laguna-apt
mv /var/cache/apt/archives/*.deb /opt/laguna-apt/
(cd /opt/laguna-apt && apt-ftparchive packages . > Packages)
apt-get purge -y -qq apt-utils >/dev/null
apt-get autoremove -y -qq >/dev/null
echo 'deb [trusted=yes] file:/opt/laguna-apt ./' > /etc/apt/sources.list
rm -f /etc/apt/sources.list.d/*
# Boot quietly inside a container.
systemctl mask getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-modules-load.service >/dev/null 2>&1
systemctl enable ssh.service >/dev/null 2>&1
: > /etc/machine-id
apt-get clean
rm -rf /var/lib/apt/lists/* /root/.cache
# The local repository's package lists, as a installed machine has its
# sources' lists (check mode's apt cannot update them).
apt-get update -qq
CHROOT

for m in proc dev; do umount -l "$work/rootfs/$m"; done
: > "$work/rootfs/etc/resolv.conf"

echo "== podman import $IMAGE"
tar -C "$work/rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL laguna.build=${build_id}" \
  - "$IMAGE" >/dev/null
echo "built $IMAGE ($build_id)"
