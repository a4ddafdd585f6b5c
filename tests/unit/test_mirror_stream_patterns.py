"""The staging role finds an interrupted mirror's streams by their command
lines (mirror.stream_patterns, through the mirror_stream_patterns filter):
checked against the command lines real rsync gives them. The sender's is the
argv the mirror runs (mirror.rsync_argv); the receiver's is the command real
rsync asks its rsh to run on the worker, recorded by a stand-in rsh, as the
worker's shell then runs it (bash execs the one command: that is the
receiver's /proc cmdline)."""

import re
import shutil
import subprocess

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import mirror
from helpers.filters import run_filter

RSYNC = shutil.which("rsync")
pytestmark = pytest.mark.skipif(RSYNC is None, reason="rsync is part of the test bed (scripts/setup.sh installs it)")


def recorded_remote_command(tmp_path, options, dest):
    """The command real rsync starts over its rsh for a mirror to ``dest``."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model-00001-of-00024.safetensors").write_bytes(b"x" * 10)
    record = tmp_path / "rsh-argv"
    rsh = tmp_path / "rsh"
    rsh.write_text("#!/bin/sh\nprintf '%%s\\0' \"$@\" > %s\nexit 1\n" % record)
    rsh.chmod(0o755)
    argv = mirror.rsync_argv(RSYNC, options, str(rsh), str(src), dest)
    subprocess.run(argv, input=b"model-00001-of-00024.safetensors\0", capture_output=True, timeout=60, check=False)
    words = record.read_bytes().rstrip(b"\0").decode().split("\0")
    # rsh [-l user] host command...: the command is what the worker runs.
    return argv, " ".join(words[words.index("rsync"):])


def test_each_pattern_matches_its_streams_command_line_as_real_rsync_makes_it(tmp_path):
    path = "/home/spark/models/hf/Laguna-S-2.1-FP8"
    dest = "spark@10.89.77.12:%s/" % path
    argv, remote = recorded_remote_command(tmp_path, ["--archive", "--whole-file"], dest)
    patterns = mirror.stream_patterns("spark@10.89.77.12:%s" % path)
    sender = " ".join(argv)
    assert remote.startswith("rsync --server ") and " --partial-dir .cache/laguna-rsync-partial " in remote, remote
    assert re.search(patterns["receivers"], remote), (patterns["receivers"], remote)
    assert re.search(patterns["senders"], sender), (patterns["senders"], sender)
    # Each finds its own side only, and only this checkpoint's streams.
    assert not re.search(patterns["senders"], remote) and not re.search(patterns["receivers"], sender)
    other = mirror.stream_patterns("spark@10.89.77.12:/home/spark/models/hf/Laguna-S-2.1-DFlash-W4A16")
    assert not re.search(other["receivers"], remote) and not re.search(other["senders"], sender)
    # The earlier receiver pattern (--partial-dir=..., one word) never matched a real receiver.
    assert not re.search(r"^\S*rsync --server .* --partial-dir=\.cache/laguna-rsync-partial ", remote)


def test_the_filter_gives_the_same_patterns_and_refuses_what_is_not_a_destination():
    dest = "spark@10.0.0.2:/srv/m"
    results = run_filter("mirror_stream_patterns", "mirror_stream_patterns", [[dest], ["/srv/m"], ["host:srv/m"]])
    assert results[0] == mirror.stream_patterns(dest) == mirror.stream_patterns(dest + "/")
    for refused in results[1:]:
        assert "Error: mirror_stream_patterns: the input must be the mirror's user@address:/path" in refused, refused
