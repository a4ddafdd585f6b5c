"""scripts/build-node-image.sh picks the node's architecture from the build host (Sparks are aarch64)."""
import os
import subprocess

import pytest

from helpers import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "build-node-image.sh")


def platform(*args, **env):
    return subprocess.run(["bash", SCRIPT, "--print-platform"] + list(args), capture_output=True, text=True,
                          env=dict(os.environ, **env), check=False)


@pytest.mark.parametrize("machine, deb, tag", [
    ("aarch64", "arm64", "aarch64"), ("arm64", "arm64", "aarch64"),
    ("x86_64", "amd64", "x86_64"), ("amd64", "amd64", "x86_64"),
])
def test_debootstrap_arch_and_wheel_tags(machine, deb, tag):
    out = platform(machine)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[0] == deb
    tags = words[2::2]
    assert words[1::2] == ["--platform"] * 3
    assert tags == ["manylinux2014_%s" % tag, "manylinux_2_17_%s" % tag, "manylinux_2_28_%s" % tag]


def test_defaults_to_this_machine_and_honours_the_override():
    here = os.uname().machine
    assert platform().stdout.split()[0] == {"x86_64": "amd64", "aarch64": "arm64"}[here]
    assert platform(LAGUNA_NODE_ARCH="aarch64").stdout.split()[0] == "arm64"


def test_unknown_architecture_fails():
    out = platform("riscv64")
    assert out.returncode != 0 and "unsupported architecture: riscv64" in out.stderr


def build_id(script=SCRIPT, **env):
    out = subprocess.run(["bash", script, "--print-build-id"], capture_output=True, text=True,
                         env=dict(os.environ, **env), check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_image_key_covers_the_script_its_package_lists_and_the_platform(tmp_path):
    """The label that decides reuse changes with every input of the image, and only with those."""
    base = build_id(LAGUNA_NODE_ARCH="x86_64")
    assert len(base) == 16
    assert build_id(LAGUNA_NODE_ARCH="amd64") == base  # the same debootstrap architecture
    assert build_id(LAGUNA_NODE_ARCH="aarch64") != base
    assert build_id(LAGUNA_NODE_ARCH="x86_64", LAGUNA_NODE_SUITE="trixie") != base
    assert build_id(LAGUNA_NODE_ARCH="x86_64", LAGUNA_NODE_MIRROR="http://mirror.invalid/debian") != base
    # The same script elsewhere: the same key (its content counts, not its path).
    copy = tmp_path / "build-node-image.sh"
    text = open(SCRIPT).read()
    copy.write_text(text)
    assert build_id(str(copy), LAGUNA_NODE_ARCH="x86_64") == base
    # One package more in either list: another key.
    for name in ("INCLUDE", "INSTALL"):
        line = next(line for line in text.splitlines() if line.startswith(name + "=("))
        copy.write_text(text.replace(line, line.replace("(", "(less ", 1)))
        assert build_id(str(copy), LAGUNA_NODE_ARCH="x86_64") != base, name


def build_until_debootstrap(tmp_path, **env):
    """The real build path up to debootstrap, with podman and debootstrap stand-ins on PATH
    (debootstrap records its arguments and fails, so nothing is built or imported)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "debootstrap.args"
    (bindir / "podman").write_text("#!/bin/sh\nexit 1\n")  # `podman image exists`: no image yet
    (bindir / "debootstrap").write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > "%s"\nexit 1\n' % record)
    for tool in ("podman", "debootstrap"):
        (bindir / tool).chmod(0o755)
    out = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, check=False,
                         env=dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]),
                                  LAGUNA_NODE_IMAGE="localhost/laguna-test-never-built", **env))
    assert out.returncode != 0
    return out, record


def test_an_unknown_architecture_stops_the_build_before_debootstrap(tmp_path):
    out, record = build_until_debootstrap(tmp_path, LAGUNA_NODE_ARCH="riscv64")
    assert "unsupported architecture: riscv64" in out.stderr
    assert not record.exists()


def test_debootstrap_installs_nftables(tmp_path):
    """The rootfs gets nft (the firewall role needs it; Ubuntu 24.04 has it)."""
    _out, record = build_until_debootstrap(tmp_path)
    args = record.read_text().splitlines()
    (include,) = [a for a in args if a.startswith("--include=")]
    packages = include[len("--include="):].split(",")
    assert "nftables" in packages and "openssh-server" in packages and "systemd" in packages
    listed = subprocess.run(["bash", SCRIPT, "--print-packages"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert listed[0].split() == packages
    assert "rsync" in listed[1].split()


def test_the_image_carries_the_monitoring_packages_as_its_only_apt_source():
    """The monitoring role installs prometheus and the node exporter with apt at converge (python3-apt
    is installed for Ansible's apt module); the image holds them in a local repository that is its only
    apt source, so the test bed reaches no other address."""
    listed = subprocess.run(["bash", SCRIPT, "--print-packages"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert "python3-apt" in listed[1].split()
    assert listed[2].split() == ["prometheus", "prometheus-node-exporter"]
    text = open(SCRIPT).read()
    assert "echo 'deb [trusted=yes] file:/opt/laguna-apt ./' > /etc/apt/sources.list" in text
    assert "rm -f /etc/apt/sources.list.d/*" in text
