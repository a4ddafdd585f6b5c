"""The stand-in's start-up memory check of each TP rank, as vLLM 0.25.1 does it.

vLLM (v1/worker/gpu_worker.py init_device) takes a MemorySnapshot of the
rank's device (vllm/utils/mem_utils.py) and calls request_memory()
(v1/worker/utils.py): it needs free >= ceil(total * gpu_memory_utilization)
or raises "Free memory on device ... is less than desired GPU memory
utilization ...", whatever --kv-cache-memory-bytes says. A GB10 is an
integrated GPU, so vLLM's free memory there is psutil.virtual_memory().available,
not what cudaMemGetInfo says. Later, with --kv-cache-memory-bytes, each rank
logs "Initial free memory ... reserved ... for KV Cache ..." (determine_available_memory).
request_memory(), format_gib() and the messages are compared with vLLM's own by
tests/conformance/test_vllm_ray_executor.py.

The stand-in GPU's figures (a stand-in-only model of a Spark's unified memory,
so that tests on a 24 GiB machine see a Spark's numbers, not the host's):

  total      "total_bytes" of the JSON file <device>.memory beside the stand-in
             device file (LAGUNA_STANDIN_GPU_DEVICE, /opt/laguna-standin/dev/nvidia0
             on the test nodes); default 124,611 MiB, the 121.69 GiB vLLM
             reports as a DGX Spark's total;
  available  total - "used_bytes" of that file (default 11,592 MiB, which
             leaves the 110.37 GiB a Spark had free when vLLM started in a
             public report) - the memory of every process holding the
             stand-in GPU, as the nvidia-smi stand-in reports it (the VmRSS of
             each flock holder, in whole MiB), this rank's own included (a real
             rank has made its CUDA context before the snapshot).

So vLLM's default 0.92 fails on a Spark-like node and the collection's 0.85
passes; a test lowers the available memory by writing, for example,
{"used_bytes": 32212254720} to <device>.memory on one node.
"""

from __future__ import annotations

import json
import math
import os

MiB = 1 << 20
GiB = 1 << 30
DEFAULT_TOTAL_BYTES = 124611 * MiB
DEFAULT_USED_BYTES = 11592 * MiB
# vLLM's CacheConfig.gpu_memory_utilization default.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# torch.device(current_platform.current_device()) of a rank: one GPU per node.
DEVICE = "cuda:0"
DEVICE_PATH = "/opt/laguna-standin/dev/nvidia0"


def device_path(environ=None):
    environ = os.environ if environ is None else environ
    return environ.get("LAGUNA_STANDIN_GPU_DEVICE", DEVICE_PATH)


def format_gib(b):
    """vllm/utils/mem_utils.py format_gib."""
    return f"{round(b / GiB, 2)}"


def holders(device, proc="/proc"):
    """{pid: MiB} of the processes holding a flock on ``device``, what the
    nvidia-smi stand-in's compute-apps query reports (tests/doubles/bin/nvidia-smi)."""
    try:
        inode = os.stat(device).st_ino
    except OSError:
        return {}
    found = {}
    try:
        with open(os.path.join(proc, "locks")) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        # "N: FLOCK ADVISORY READ <pid> <maj>:<min>:<inode> 0 EOF" ("->" marks a waiter)
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5].split(":")[-1] != str(inode):
            continue
        pid = int(fields[4])
        mib = 0
        try:
            with open(os.path.join(proc, str(pid), "status")) as handle:
                for status in handle:
                    if status.startswith("VmRSS:"):
                        mib = int(status.split()[1]) // 1024
        except (OSError, ValueError):
            continue
        found[pid] = mib
    return found


def read_figures(device):
    """(total_bytes, used_bytes) of the stand-in GPU: its <device>.memory file, else the defaults."""
    path = device + ".memory"
    config = {}
    if os.path.exists(path):
        try:
            with open(path) as handle:
                config = json.load(handle)
            total = int(config.get("total_bytes", DEFAULT_TOTAL_BYTES))
            used = int(config.get("used_bytes", DEFAULT_USED_BYTES))
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise RuntimeError("stand-in GPU memory file %s: %s (want a JSON object with "
                               "total_bytes and/or used_bytes)" % (path, exc)) from None
        return total, used
    return DEFAULT_TOTAL_BYTES, DEFAULT_USED_BYTES


def snapshot(device=None, proc="/proc"):
    """The rank's MemorySnapshot on the stand-in GPU: total_memory, free_memory (the available memory)."""
    device = device_path() if device is None else device
    total, used = read_figures(device)
    held = sum(holders(device, proc).values()) * MiB
    return {"device": DEVICE, "total_memory": total, "free_memory": max(0, total - used - held),
            "held_bytes": held}


def request_memory(snap, gpu_memory_utilization):
    """vllm/v1/worker/utils.py request_memory: the bytes vLLM plans with, or its ValueError."""
    requested_memory = math.ceil(snap["total_memory"] * gpu_memory_utilization)
    if snap["free_memory"] < requested_memory:
        raise ValueError(
            f"Free memory on device {snap['device']} "
            f"({format_gib(snap['free_memory'])}/"
            f"{format_gib(snap['total_memory'])} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({gpu_memory_utilization}, "
            f"{format_gib(requested_memory)} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes."
        )
    return requested_memory


def kv_cache_reserved_message(free_memory, kv_cache_memory_bytes):
    """What gpu_worker.py determine_available_memory logs with --kv-cache-memory-bytes."""
    return (
        f"Initial free memory {format_gib(free_memory)} "
        f"GiB, reserved {format_gib(kv_cache_memory_bytes)} GiB memory for "
        "KV Cache as specified by kv_cache_memory_bytes config and "
        "skipped memory profiling. This does not respect the "
        "gpu_memory_utilization config. Only use kv_cache_memory_bytes "
        "config when you want manual control of KV cache memory "
        "size. If OOM'ed, check the difference of initial free "
        "memory between the current run and the previous run "
        "where kv_cache_memory_bytes is suggested and update it "
        "correspondingly."
    )
