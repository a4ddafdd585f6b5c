# shellcheck shell=bash
# Sourced by the scripts that run podman or molecule: point podman at the
# project's own containers.conf instead of /etc/containers/containers.conf.
# CONTAINERS_CONF replaces the system files for this process tree only.
_laguna_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CONTAINERS_CONF="$_laguna_root/molecule/containers.conf"
unset _laguna_root
