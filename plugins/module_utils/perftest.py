# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Command lines and reports of the RDMA bandwidth tests.

ib_write_bw (linux-rdma/perftest): the header prints " Device         : %s"
and " GID index       : %d", the result table is headed by RESULT_FMT_G
(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]
MsgRate[Mpps]") with --report_gbits, RESULT_FMT ("[MiB/sec]") without, and
each row follows REPORT_FMT (bytes, iterations, peak, average, rate).

all_gather_perf (NVIDIA/nccl-tests): one row per size and the summary line
"# Avg bus bandwidth    : <GB/s>" (src/util.cu).
"""

from __future__ import annotations

import re

IB_HEADER_RE = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb/sec|MiB/sec|MB/sec)\]\s+BW average\[(Gb/sec|MiB/sec|MB/sec)\]")
IB_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)")
AG_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.M)
AG_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.M)


def _to_gbps(value, unit):
    if unit == "Gb/sec":
        return value
    if unit == "MiB/sec":
        return value * 1024 * 1024 * 8 / 1e9
    return value * 1e6 * 8 / 1e9


def _field(text, label):
    match = re.search(r"^\s*%s\s*:\s*(\S+)" % re.escape(label), text, re.M)
    if match:
        return match.group(1)
    match = re.search(r"\t\t%s\s*:\s*(\S+)" % re.escape(label), text)
    return match.group(1) if match else None


def parse_ib_write_bw(text):
    """The client's report as a dict; raises ValueError if it has no result row."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        header = IB_HEADER_RE.search(line)
        if not header:
            continue
        for row in lines[i + 1:]:
            match = IB_ROW_RE.match(row)
            if match:
                unit = header.group(2)
                gid = _field(text, "GID index")
                mtu = _field(text, "Mtu")
                return {
                    "tool": "ib_write_bw",
                    "device": _field(text, "Device"),
                    "gid_index": int(gid) if gid and gid.isdigit() else None,
                    "link_type": _field(text, "Link type"),
                    "mtu": int(re.sub(r"\D", "", mtu)) if mtu else None,
                    "bytes": int(match.group(1)),
                    "iterations": int(match.group(2)),
                    "peak_gbps": round(_to_gbps(float(match.group(3)), header.group(1)), 2),
                    "average_gbps": round(_to_gbps(float(match.group(4)), unit), 2),
                    "msg_rate_mpps": float(match.group(5)),
                }
    raise ValueError("no ib_write_bw result row in the output")


def parse_all_gather(text):
    """all_gather_perf's summary: average bus bandwidth in GB/s and Gb/s."""
    match = AG_AVG_RE.search(text)
    if not match:
        raise ValueError("no '# Avg bus bandwidth' line in the all_gather_perf output")
    oob = AG_OOB_RE.search(text)
    busbw = float(match.group(1))
    return {
        "tool": "all_gather_perf",
        "busbw_gbytes": busbw,
        "average_gbps": round(busbw * 8, 2),
        "out_of_bounds": int(oob.group(1)) if oob else None,
    }


def ib_write_bw_argv(device, port, gid_index, tcp_port, duration, size, qps, server=None):
    """ib_write_bw's argv; with ``server`` (its address) the client's, else the server's."""
    argv = ["ib_write_bw", "-d", device, "-i", str(port), "-x", str(gid_index),
            "-p", str(tcp_port), "-D", str(duration), "-s", str(size), "-q", str(qps),
            "-F", "--report_gbits"]
    return argv + [server] if server else argv


def all_gather_argv(hosts, env, size="1G", iters=20, mpirun="mpirun", binary="all_gather_perf"):
    """mpirun line of all_gather_perf, one rank (one GB10) per host, NCCL env exported."""
    argv = [mpirun, "-np", str(len(hosts)), "-H", ",".join("%s:1" % h for h in hosts)]
    for key in sorted(env):
        argv += ["-x", "%s=%s" % (key, env[key])]
    return argv + [binary, "-b", size, "-e", size, "-f", "2", "-g", "1", "-n", str(iters)]


def plan_pairs(head, worker, base_port=18515, duration=5, size=1048576, qps=4, tool_path="ib_write_bw"):
    """One server/client pair per twin between a head and a worker.

    ``head``/``worker`` are dicts with ``host``, ``twins`` (list of dicts with
    name, port, netdev, rate, mtu, pcie_speed, pcie_width), ``addresses``
    (address/prefix per twin) and ``gid_indexes`` (the index per twin)."""
    pairs = []
    for k, (htwin, wtwin) in enumerate(zip(head["twins"], worker["twins"])):
        server_ip = worker["addresses"][k].split("/")[0]
        tcp_port = base_port + k
        server = ib_write_bw_argv(wtwin["name"], wtwin["port"], worker["gid_indexes"][k], tcp_port, duration, size, qps)
        client = ib_write_bw_argv(htwin["name"], htwin["port"], head["gid_indexes"][k], tcp_port, duration, size, qps,
                                  server_ip)
        server[0] = client[0] = tool_path
        pairs.append({
            "worker": worker["host"], "twin": k, "head_device": htwin["name"], "worker_device": wtwin["name"],
            "server_address": server_ip, "server_argv": server, "client_argv": client,
            "head_link": _link(htwin), "worker_link": _link(wtwin),
        })
    return pairs


# ib_write_bw's run takes about its duration plus the connection's set-up;
# RUN_MARGIN (s) covers a slow start. The network_gate role starts every
# server at once and runs the clients one after the other, so the server of
# the k-th pair waits through the k pairs before it.
RUN_MARGIN = 60


def schedule(pairs, duration, margin=RUN_MARGIN):
    """Give each planned pair the commands the role runs, bounded by timeout(1).

    Adds ``client_command`` (the client, at most duration + margin s),
    ``server_command`` (the k-th server, at most (k + 1) x (duration + margin) s)
    and ``server_async`` (the async bound of the server's task, 30 s more)."""
    run = duration + margin
    for k, pair in enumerate(pairs):
        pair["client_command"] = ["timeout", str(run)] + pair["client_argv"]
        pair["server_command"] = ["timeout", str((k + 1) * run)] + pair["server_argv"]
        pair["server_async"] = (k + 1) * run + 30
    return pairs


def plan(tool, head, workers, tool_path="ib_write_bw", base_port=18515, duration=5, size=1048576, qps=4,
         nccl_env=None, min_gbps_per_device=90.0, min_gbps_total=0.0):
    """The tests between ``head`` and ``workers``, as ib_bw_check returns them: ``threshold_total``
    (``min_gbps_total``, or per device x the head's twins when 0), and ``pairs`` (ib_write_bw, each
    scheduled) or ``argv`` (all_gather_perf). ValueError when a bound is broken."""
    if not 1 <= duration <= 600 or not 1 <= qps <= 64 or not 1024 <= base_port <= 65000:
        raise ValueError("duration 1-600 s, qps 1-64 and base_port 1024-65000 are the bounds")
    twins = len(head.get("twins") or [])
    result = dict(threshold_total=min_gbps_total or min_gbps_per_device * max(twins, 1))
    if tool == "all_gather_perf":
        hosts = [head["addresses"][0].split("/")[0]] + [w["addresses"][0].split("/")[0] for w in workers]
        result["argv"] = all_gather_argv(hosts, nccl_env or {})
    else:
        pairs = []
        for worker in workers:
            pairs += plan_pairs(head, worker, base_port, duration, size, qps, tool_path)
        result["pairs"] = schedule(pairs, duration)
    return result


def _link(twin):
    return {key: twin.get(key) for key in ("name", "netdev", "state", "rate", "mtu", "pcie_speed", "pcie_width")}


def diagnose(link):
    """What to look at on one side of a slow twin."""
    notes = []
    if link.get("state") and "ACTIVE" not in link["state"]:
        notes.append("port state %s" % link["state"])
    if link.get("rate"):
        notes.append("port rate %s" % link["rate"])
    if link.get("mtu") is not None and link["mtu"] < 9000:
        notes.append("MTU %s < 9000" % link["mtu"])
    if link.get("pcie_width") or link.get("pcie_speed"):
        notes.append("PCIe x%s at %s" % (link.get("pcie_width") or "?", link.get("pcie_speed") or "?"))
    return "%s (%s): %s" % (link.get("name"), link.get("netdev"), ", ".join(notes) or "nothing unusual in sysfs")


def evaluate(measurements, min_gbps_per_device, min_gbps_total):
    """measurements: dicts with worker, head_device, worker_device, average_gbps,
    head_link, worker_link (a whole-link figure has no devices). Returns
    (ok, per-worker totals, failure lines)."""
    totals = {}
    problems = []
    for m in measurements:
        totals[m["worker"]] = round(totals.get(m["worker"], 0.0) + m["average_gbps"], 2)
        if m.get("head_device") and m["average_gbps"] < min_gbps_per_device:
            problems.append(
                "%s <-> %s %s: %.2f Gb/s < %.2f Gb/s per device; head %s; worker %s" % (
                    m["head_device"], m["worker"], m["worker_device"], m["average_gbps"], min_gbps_per_device,
                    diagnose(m["head_link"]), diagnose(m["worker_link"])))
    for worker, total in sorted(totals.items()):
        if total < min_gbps_total:
            problems.append("head <-> %s: %.2f Gb/s in total < %.2f Gb/s" % (worker, total, min_gbps_total))
    return not problems, totals, problems
