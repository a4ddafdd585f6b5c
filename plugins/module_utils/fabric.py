# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The CX7 fabric of a DGX Spark, read from sysfs.

On a Spark each QSFP port of the ConnectX-7 reaches the SoC over two PCIe
x4 links, so one cabled port shows up as two RDMA devices ("twins") with a
netdev each, e.g. ``rocep1s0f1``/``enp1s0f1np1`` (PCI 0000:01:00.1) and
``roceP2p1s0f1``/``enP2p1s0f1np1`` (PCI 0002:01:00.1). They share the PCI
bus/device/function and differ in the PCI domain. Each carries about
100 Gb/s; NCCL gets the full port only with both in ``NCCL_IB_HCA``.

Layout read here (the kernel's)::

    <ib>/<dev>/device -> .../<pci address>      (absent in fake trees)
    <ib>/<dev>/device/net/<netdev>
    <ib>/<dev>/ports/<port>/{state,phys_state,rate,link_layer}
    <ib>/<dev>/ports/<port>/gids/<n>, gid_attrs/{types,ndevs}/<n>
    <net>/<netdev>/{operstate,mtu}
    <pci dir>/{current_link_speed,current_link_width}

``nccl_gid_index`` replays NCCL 2.28.9's choice of a RoCE GID when
``NCCL_IB_GID_INDEX`` is unset (src/transport/net_ib.cc, ncclIbGetGidIndex
and ncclUpdateGidIndex; the default became -1, i.e. per-device selection, in
v2.21.5-1), so the role can check, before anything starts, which GID NCCL
will use on each twin.
"""

from __future__ import annotations

import ipaddress
import os
import re

from ansible_collections.laguna.spark.plugins.module_utils import roce
from ansible_collections.laguna.spark.plugins.module_utils.files import list_dir, read_sysfs

PCI_RE = re.compile(r"^([0-9a-fA-F]{4,}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
AF_INET = "AF_INET"
AF_INET6 = "AF_INET6"


def _gid_table(sysfs_ib, dev, port):
    """{index: (gid, type)} of every GID slot, populated or not, and the table length."""
    base = os.path.join(sysfs_ib, dev, "ports", str(port))
    table = {}
    for name in list_dir(os.path.join(base, "gids")):
        if not name.isdigit():
            continue
        table[int(name)] = (read_sysfs(os.path.join(base, "gids", name)),
                            read_sysfs(os.path.join(base, "gid_attrs", "types", name)))
    return table, (max(table) + 1 if table else 0)


def device_info(sysfs_ib, sysfs_net, dev, port=1):
    """Everything the roles need to know about one RDMA device."""
    base = os.path.join(sysfs_ib, dev)
    pbase = os.path.join(base, "ports", str(port))
    link = os.path.join(base, "device")
    pci = None
    pci_dir = None
    if os.path.exists(link):
        pci_dir = os.path.realpath(link)
        name = os.path.basename(pci_dir)
        pci = name if PCI_RE.match(name) else None
    netdevs = list_dir(os.path.join(link, "net")) if pci_dir else []
    try:
        gids = roce.scan_gids(sysfs_ib, dev, port)
    except FileNotFoundError:
        gids = []
    if not netdevs:
        netdevs = sorted({g["ndev"] for g in gids if g.get("ndev")})
    netdev = netdevs[0] if netdevs else None
    ndir = os.path.join(sysfs_net, netdev) if netdev else None
    mtu = read_sysfs(os.path.join(ndir, "mtu")) if ndir else None
    return {
        "name": dev,
        "port": int(port),
        "pci": pci,
        "state": read_sysfs(os.path.join(pbase, "state")),
        "phys_state": read_sysfs(os.path.join(pbase, "phys_state")),
        "rate": read_sysfs(os.path.join(pbase, "rate")),
        "link_layer": read_sysfs(os.path.join(pbase, "link_layer")),
        "sys_image_guid": read_sysfs(os.path.join(base, "sys_image_guid")),
        "netdev": netdev,
        "netdev_present": bool(ndir and os.path.isdir(ndir)),
        "operstate": read_sysfs(os.path.join(ndir, "operstate")) if ndir else None,
        "mtu": int(mtu) if mtu and mtu.isdigit() else None,
        "pcie_speed": read_sysfs(os.path.join(pci_dir, "current_link_speed")) if pci_dir else None,
        "pcie_width": read_sysfs(os.path.join(pci_dir, "current_link_width")) if pci_dir else None,
        "gids": gids,
    }


def scan(sysfs_ib, sysfs_net, port=1):
    """device_info of every RDMA device under ``sysfs_ib`` that has ``port``."""
    return [device_info(sysfs_ib, sysfs_net, dev, port) for dev in list_dir(sysfs_ib)
            if os.path.isdir(os.path.join(sysfs_ib, dev, "ports", str(port)))]


def is_active(device):
    return bool(device.get("state")) and "ACTIVE" in device["state"]


def _pci_key(pci):
    """(bus, device, function) and domain of a PCI address, or None."""
    match = PCI_RE.match(pci or "")
    if not match:
        return None, None
    return (match.group(2).lower(), match.group(3).lower(), match.group(4)), int(match.group(1), 16)


def twins_of(devices, primary):
    """The devices on the same physical port as ``primary``: same PCI
    bus/device/function in another PCI domain, lowest domain first. Without
    a PCI address (a fake tree) a device is its own only twin."""
    key = _pci_key(primary.get("pci"))[0]
    if key is None:
        return [primary]
    group = [d for d in devices if _pci_key(d.get("pci"))[0] == key and d["port"] == primary["port"]]
    return sorted(group, key=lambda d: _pci_key(d["pci"])[1])


def find_cabled_port(devices, hint=None):
    """(twins, note): the twins of the cabled port (ACTIVE), preferring the
    group holding ``hint``. Raises ValueError with a listing when none or
    several ports are cabled."""
    if not devices:
        raise ValueError("no RDMA devices found")
    active = [d for d in devices if is_active(d)]
    groups = []
    for device in active:
        group = twins_of(devices, device)
        if [d["name"] for d in group] not in [[d["name"] for d in g] for g in groups]:
            groups.append(group)
    if not groups:
        hinted = [d for d in devices if d["name"] == hint and not d.get("state")]
        if hinted:  # a tree without port state (some fakes): take the hint, say so
            return twins_of(devices, hinted[0]), "the state of %s is unreadable; taken as the cabled port" % hint
        raise ValueError("no RDMA port is ACTIVE (is the cable in?): " + describe_devices(devices))
    if hint:
        for group in groups:
            if hint in [d["name"] for d in group]:
                return group, None
    if len(groups) > 1:
        raise ValueError("several ports are ACTIVE and none holds %r; set laguna_hca to one of %s"
                         % (hint, ", ".join(g[0]["name"] for g in groups)))
    note = None
    if hint and hint not in [d["name"] for d in groups[0]]:
        note = "laguna_hca is %s, but the cabled port is %s" % (hint, "+".join(d["name"] for d in groups[0]))
    return groups[0], note


def describe_devices(devices):
    return "; ".join(
        "%s port %d: %s, %s, netdev %s%s" % (
            d["name"], d["port"], d.get("state") or "state unreadable", d.get("rate") or "rate unreadable",
            d.get("netdev") or "none", ", PCI %s" % d["pci"] if d.get("pci") else "")
        for d in devices) or "(none)"


def plan_addresses(primary, prefix, count, explicit=None):
    """One ``a.b.c.d/prefix`` per twin. Twin k gets the primary address
    shifted by k subnets (192.168.100.1/24 -> 192.168.101.1/24), so each
    twin is alone in its subnet and the kernel's routing stays unambiguous.
    ``explicit`` (a list of addresses, with or without /prefix) wins."""
    if explicit:
        out = []
        for item in explicit[:count]:
            iface = ipaddress.IPv4Interface(item if "/" in str(item) else "%s/%d" % (item, prefix))
            out.append(str(iface))
        if len(out) < count:
            raise ValueError("%d twins but only %d addresses given" % (count, len(out)))
        return out
    iface = ipaddress.IPv4Interface("%s/%d" % (primary, prefix))
    size = iface.network.num_addresses
    return [str(ipaddress.IPv4Interface("%s/%d" % (iface.ip + k * size, prefix))) for k in range(count)]


# --- NCCL's GID choice (NCCL 2.28.9, src/transport/net_ib.cc) -------------

def _raw(gid):
    try:
        return ipaddress.IPv6Address(gid or "::").packed
    except ValueError:
        return bytes(16)


def _words(gid):
    raw = _raw(gid)
    return [int.from_bytes(raw[i:i + 4], "big") for i in range(0, 16, 4)]


def gid_family(gid):
    w = _words(gid)
    mapped = (w[0] | w[1] | (w[2] ^ 0x0000FFFF)) == 0
    mapped_mc = w[0] == 0xFF0E0000 and (w[1] | (w[2] ^ 0x0000FFFF)) == 0
    return AF_INET if mapped or mapped_mc else AF_INET6


def _configured(gid):
    w = _words(gid)
    trailer = w[1] | w[2] | w[3]
    return not ((w[0] | trailer) == 0 or (w[0] == 0xFE800000 and trailer == 0))


def _link_local(gid):
    w = _words(gid)
    return w[0] == 0xFE800000 and w[1] == 0


def _valid(gid):
    return _configured(gid) and not _link_local(gid)


def _match_prefix(family, addr_range, gid):
    if not addr_range:
        return True
    net = ipaddress.ip_network(addr_range, strict=False)
    if family == AF_INET:
        mapped = ipaddress.IPv4Address(_raw(gid)[12:16])
        return mapped in net
    return ipaddress.IPv6Address(_raw(gid)) in net


def _version(kind):
    if not kind:
        return None
    if kind.startswith("IB/RoCE v1") or kind.startswith("RoCE v1"):
        return 1
    if kind.startswith("RoCE v2"):
        return 2
    return None


def nccl_gid_index(table, length, family=AF_INET, roce_version=2, addr_range=None):
    """The GID index NCCL picks on a RoCE port when NCCL_IB_GID_INDEX is
    unset: ``table`` is {index: (gid, type)} (slots absent are zero GIDs),
    ``length`` the port's GID table length. NCCL_IB_ADDR_FAMILY,
    NCCL_IB_ROCE_VERSION_NUM and NCCL_IB_ADDR_RANGE are the arguments."""
    def gid(i):
        return table.get(i, ("::", None))[0]

    def kind(i):
        return table.get(i, ("::", None))[1]

    current = 0
    for cand in range(1, length):
        cur_gid, cand_gid = gid(current), gid(cand)
        cand_fam = gid_family(cand_gid)
        match = _match_prefix(family, addr_range, cand_gid)
        if cand_fam != gid_family(cur_gid) and cand_fam == family and match:
            current = cand
            continue
        if cand_fam != family or not _valid(cand_gid) or not match:
            continue
        cur_ver, cand_ver = _version(kind(current)), _version(kind(cand))
        cand_ver = -1 if cand_ver is None else cand_ver
        if (cur_ver != cand_ver or not _valid(cur_gid)) and cand_ver == roce_version:
            current = cand
    return current


def check_twin(sysfs_ib, device, address, addr_range=None):
    """What NCCL would use on one twin and which GID is the right one.

    Returns a dict: ``nccl_index`` (NCCL's own choice), ``wanted_index``
    (lowest RoCE v2 GID mapping the twin's planned address, or None),
    ``nccl_ok`` (they agree)."""
    table, length = _gid_table(sysfs_ib, device["name"], device["port"])
    ip = str(ipaddress.IPv4Interface(address).ip)
    wanted = roce.find_gid(device["gids"], ip)
    nccl = nccl_gid_index(table, length, addr_range=addr_range) if length else None
    chosen = table.get(nccl, (None, None)) if nccl is not None else (None, None)
    return {
        "device": device["name"],
        "address": ip,
        "wanted_index": wanted["index"] if wanted else None,
        "nccl_index": nccl,
        "nccl_gid": chosen[0],
        "nccl_gid_type": chosen[1],
        "nccl_ok": wanted is not None and nccl == wanted["index"],
    }


def covering_range(addresses):
    """The smallest IPv4 network holding every twin's subnet."""
    nets = [ipaddress.IPv4Interface(a).network for a in addresses]
    net = nets[0]
    while not all(n.subnet_of(net) for n in nets):
        net = net.supernet()
    return str(net)


def choose_gid_policy(sysfs_ib, twins, addresses, mode="auto"):
    """How NCCL finds the right GID on every twin.

    ``nccl``: leave NCCL_IB_GID_INDEX unset, NCCL's per-device choice is right
    on every twin. ``pinned``: one NCCL_IB_GID_INDEX that is the RoCE v2 GID
    of the twin's address on every twin. ``range``: NCCL_IB_ADDR_RANGE makes
    NCCL's per-device choice right. ``auto`` tries them in that order.
    Returns (policy, env, checks); policy is None when nothing works."""
    checks = [check_twin(sysfs_ib, d, a) for d, a in zip(twins, addresses)]
    order = ["nccl", "pinned", "range"] if mode == "auto" else [mode]
    for policy in order:
        if policy == "nccl" and all(c["nccl_ok"] for c in checks):
            return "nccl", {}, checks
        if policy == "pinned":
            wanted = {c["wanted_index"] for c in checks}
            if len(wanted) == 1 and None not in wanted:
                return "pinned", {"NCCL_IB_GID_INDEX": str(wanted.pop())}, checks
        if policy == "range" and all(c["wanted_index"] is not None for c in checks):
            cidr = covering_range(addresses)
            ranged = [check_twin(sysfs_ib, d, a, cidr) for d, a in zip(twins, addresses)]
            if all(c["nccl_ok"] for c in ranged):
                return "range", {"NCCL_IB_ADDR_RANGE": cidr}, ranged
    return None, {}, checks


def nccl_ib_hca(twins):
    """NCCL_IB_HCA naming exactly these devices and ports (``=`` is NCCL's exact-match prefix)."""
    return "=" + ",".join("%s:%d" % (d["name"], d["port"]) for d in twins)


def render_netplan(twins, addresses, mtu=9000, renderer=None):
    """A netplan document giving every twin's netdev its static address and MTU."""
    lines = [
        "# Managed by laguna.spark (role fabric): the cabled CX7 port's twins,",
        "# static point-to-point addresses. Edit the inventory, not this file.",
        "network:",
        "  version: 2",
    ]
    if renderer:
        lines.append("  renderer: %s" % renderer)
    lines.append("  ethernets:")
    for device, address in zip(twins, addresses):
        lines += [
            "    %s:" % device["netdev"],
            "      dhcp4: false",
            "      dhcp6: false",
            "      accept-ra: false",
            "      mtu: %d" % int(mtu),
            "      addresses:",
            "        - %s" % address,
        ]
    return "\n".join(lines) + "\n"
