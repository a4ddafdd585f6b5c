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
