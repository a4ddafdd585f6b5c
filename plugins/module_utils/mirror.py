# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Mirror files to another node with several rsync-over-ssh streams at once.

One rsync/ssh pair tops out at one core's worth of AES-GCM and rsync
bookkeeping, far below a 200 Gb/s link; N streams, each with its own share
of the files, use N cores. Every stream writes into a temp dir under the
destination's .cache (never under a file's final name), keeps an interrupted
file as a resumable partial under .cache, and renames a file into place only
once it is whole.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

PARTIAL_DIR = ".cache/laguna-rsync-partial"
TMP_DIR = ".cache/laguna-rsync-tmp"
PROGRESS = re.compile(r"^\s*([\d,]+)\s+\d+%")
ITEMIZED = re.compile(r"^[<>ch.*][fdLDS][c.+?][s.+?][tT.+?]")


def plan(files, streams):
    """Spread {path: size} over at most ``streams`` lists, largest first onto
    the least loaded stream, so the streams finish together."""
    buckets = [[0, []] for _stream in range(max(1, min(streams, len(files))))]
    for rel, size in sorted(files.items(), key=lambda kv: (-kv[1], kv[0])):
        bucket = min(buckets, key=lambda b: b[0])
        bucket[0] += size
        bucket[1].append(rel)
    return [sorted(b[1]) for b in buckets if b[1]]


def stream_patterns(dest):
    """Regular expressions (for stray_processes, on a process's command line)
    of the rsync streams a mirror to ``dest`` (user@address:path, as the
    mirror is given it) runs: the senders on the head (rsync_argv's command
    line) and their receivers on the worker, the command each sender starts
    there over its rsh, writing into dest's path. rsync passes the partial
    directory to that server as two words ("rsync --server -logDtpre.iLsfxCIvu
    --partial-dir .cache/laguna-rsync-partial --temp-dir ... . <path>/"), its
    own client takes it as one (--partial-dir=...)."""
    partial = re.escape(PARTIAL_DIR)
    dest = dest.rstrip("/") + "/"
    path = dest[dest.index(":/") + 1:]
    return {"senders": r"^\S*rsync .* --partial-dir=%s .* %s$" % (partial, re.escape(dest)),
            "receivers": r"^\S*rsync --server .* --partial-dir %s .* %s$" % (partial, re.escape(path))}


def rsync_argv(rsync, options, rsh, src, dest):
    """One stream's argv: the files come on stdin (--files-from=- --from0)."""
    return ([rsync] + list(options) +
            ["--partial-dir=" + PARTIAL_DIR, "--temp-dir=" + TMP_DIR,
             "--files-from=-", "--from0", "--info=progress2", "--no-inc-recursive",
             "--out-format=%i %n", "--rsh", rsh, src.rstrip("/") + "/", dest.rstrip("/") + "/"])


def _die_with_parent():
    """preexec: the stream dies when the module does (SIGKILL, a Ctrl-C'd playbook)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Stream:
    def __init__(self, index, argv, files, total):
        self.index, self.argv, self.files, self.total = index, argv, files, total
        self.done = 0
        self.itemized = []
        self.other = []
        self.proc = None
        self.rc = None
        self.err = b""

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, preexec_fn=_die_with_parent, start_new_session=True)
        self.readers = [threading.Thread(target=self._read_out, daemon=True),
                        threading.Thread(target=self._read_err, daemon=True)]
        for reader in self.readers:
            reader.start()
        try:
            self.proc.stdin.write(b"\0".join(f.encode() for f in self.files) + b"\0")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def _read_out(self):
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536) if hasattr(self.proc.stdout, "read1") else self.proc.stdout.read(65536)
            if not chunk:
                break
            buf += chunk
            parts = re.split(rb"[\r\n]", buf)
            buf = parts.pop()
            for line in parts:
                self._line(line.decode(errors="replace"))
        if buf:
            self._line(buf.decode(errors="replace"))

    def _line(self, line):
        match = PROGRESS.match(line)
        if match:
            self.done = min(int(match.group(1).replace(",", "")), self.total)
        elif ITEMIZED.match(line):
            self.itemized.append(line)
        elif line.strip():
            self.other.append(line)

    def _read_err(self):
        self.err = self.proc.stderr.read()

    def wait(self):
        self.rc = self.proc.wait()
        for reader in self.readers:
            reader.join(10)
        if self.rc == 0:
            self.done = self.total
        return self.rc


def write_progress(path, streams, total, started):
    if not path:
        return
    done = sum(s.done for s in streams)
    elapsed = max(time.monotonic() - started, 1e-6)
    data = {"done": done, "total": total, "seconds": round(elapsed, 3), "rate": done / elapsed,
            "streams": len(streams), "running": sum(1 for s in streams if s.rc is None), "t": time.time()}
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # progress is a courtesy; the copy goes on


def run(streams, total, progress_file=None, interval=2.0):
    """Start every stream, write progress every ``interval`` s, wait for all."""
    started = time.monotonic()
    for stream in streams:
        stream.start()
    waiters = [threading.Thread(target=s.wait, daemon=True) for s in streams]
    for waiter in waiters:
        waiter.start()
    while any(w.is_alive() for w in waiters):
        write_progress(progress_file, streams, total, started)
        for waiter in waiters:
            waiter.join(interval / max(len(waiters), 1))
    write_progress(progress_file, streams, total, started)
    return time.monotonic() - started
