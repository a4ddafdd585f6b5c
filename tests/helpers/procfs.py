"""A fake /proc: one directory per process with its command line and cgroup."""


def fake_proc(root, pid, cmd, cgroup):
    """Write ``root/<pid>/cmdline`` (``cmd``, NUL-separated) and ``root/<pid>/cgroup``."""
    d = root / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(b"\0".join(c.encode() for c in cmd) + b"\0")
    (d / "cgroup").write_text(cgroup)
