#!/usr/bin/env bash
# Build the local podman image that stands in for a DGX Spark node in the
# molecule scenarios. No registry is reachable, so the image is made from a
# debootstrapped Debian rootfs and `podman import`ed.
#
# What it holds is what a Spark has before this collection touches it:
# systemd as PID 1, sshd, rsync, a service user `spark` (uid 1000) and a
# Python venv at /home/spark/.venvs/vllm with a real Ray installed. The
# hardware doubles (stand-in vllm/hf/nvidia-smi, fake RoCE sysfs) are not
# baked in: molecule's prepare step installs them, so they are visible in the
# scenario. The image is rebuilt only when this script changes.
set -euo pipefail

IMAGE="${LAGUNA_NODE_IMAGE:-localhost/laguna-spark-node:latest}"
SUITE="${LAGUNA_NODE_SUITE:-bookworm}"
MIRROR="${LAGUNA_NODE_MIRROR:-http://deb.debian.org/debian}"
RAY_VERSION="${LAGUNA_NODE_RAY_VERSION:-2.60.0}"
# Python (with pip) that downloads the node's wheels: the project venv's.
PYTHON="${PYTHON:-python3}"
NODE_USER=spark
NODE_UID=1000
VENV="/home/${NODE_USER}/.venvs/vllm"

build_id="$( (cat "$0"; echo "$IMAGE $SUITE $RAY_VERSION") | sha256sum | cut -c1-16)"
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

echo "== debootstrap $SUITE into $work/rootfs"
debootstrap --variant=minbase \
  --include=python3,systemd,systemd-sysv,dbus,sudo,openssh-server \
  "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
  { tail -n 40 "$work/debootstrap.log"; exit 1; }

echo "== Ray $RAY_VERSION wheels for the node's Python"
py_ver="$(chroot "$work/rootfs" python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
mkdir -p "$work/rootfs/tmp/wheels"
"$PYTHON" -m pip download --quiet --only-binary=:all: --implementation cp \
  --python-version "$py_ver" --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --dest "$work/rootfs/tmp/wheels" "ray==${RAY_VERSION}"

cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
mount -t proc proc "$work/rootfs/proc"
mount --rbind /dev "$work/rootfs/dev"

echo "== packages, user and venv inside the rootfs"
chroot "$work/rootfs" /bin/bash -euo pipefail -s <<CHROOT
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  dbus-user-session libpam-systemd rsync python3-venv procps iproute2 \
  openssh-client ca-certificates >/dev/null
useradd --create-home --uid ${NODE_UID} --shell /bin/bash ${NODE_USER}
python3 -m venv ${VENV}
${VENV}/bin/pip install --quiet --no-index --find-links /tmp/wheels "ray==${RAY_VERSION}"
chown -R ${NODE_USER}:${NODE_USER} /home/${NODE_USER}
# Boot quietly inside a container.
systemctl mask getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-modules-load.service >/dev/null 2>&1
systemctl enable ssh.service >/dev/null 2>&1
: > /etc/machine-id
apt-get clean
rm -rf /var/lib/apt/lists/* /tmp/wheels /root/.cache
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
