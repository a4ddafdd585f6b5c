"""A process that holds the stand-in GPU (tests/doubles/bin/nvidia-smi reports it)."""

import contextlib
import subprocess
import sys

# The stand-in's CUDA context: a shared flock on the device file.
HOLDER = ("import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_SH); "
          "print('ready', flush=True); time.sleep(600)")


@contextlib.contextmanager
def holding(device):
    """A child process holding ``device`` for the duration of the block; yields it."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(device)], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        yield child
    finally:
        child.kill()
        child.wait()
