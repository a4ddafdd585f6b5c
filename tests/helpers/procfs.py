"""A fake /proc: one directory per process with its command line and cgroup."""


def fake_proc(root, pid, cmd, cgroup, state="S"):
    """Write ``root/<pid>/cmdline`` (``cmd``, NUL-separated), ``root/<pid>/cgroup``
    and ``root/<pid>/stat`` (the kernel's format; ``state`` its third field)."""
    d = root / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(b"\0".join(c.encode() for c in cmd) + b"\0")
    (d / "cgroup").write_text(cgroup)
    # The command name may hold spaces and parentheses: the state follows the last ")".
    (d / "stat").write_text("%d (%s) %s 1 %d %d 0 -1 4194560 0 0 0 0\n" % (pid, "a (b) c", state, pid, pid))
