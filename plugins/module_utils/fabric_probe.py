# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The fabric role's read (modules fabric_probe and rdma_netdev_info).

``discover`` is the discovery both modules make (the cabled port's twins,
their netdevs, the planned addresses, the netplan document, the GID policy);
``compare`` is what the probe adds: the netplan file against the document,
and every twin's netdev (MTU, administrative state, IPv4 addresses) against
what the document sets. It decides what the role's netplan tasks do:
write the file (``netplan_write``), apply it (``netplan_apply``), and says
each difference in one line.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re

from ansible_collections.laguna.spark.plugins.module_utils import fabric
from ansible_collections.laguna.spark.plugins.module_utils.files import read_bytes, read_sysfs

IFF_UP = 0x1
# `ip -4 -o addr show`: "2: eth0    inet 10.89.77.12/24 brd 10.89.77.255 scope global eth0\ ..."
IP_ADDR_RE = re.compile(r"^\s*\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\S+)")


class DiscoveryError(Exception):
    """Discovery failed; ``result`` holds what was read (the devices)."""

    def __init__(self, msg, result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result


def discover(p):
    """rdma_netdev_info's result for the options ``p`` (sysfs_infiniband,
    sysfs_net, port, hca_hint, address, prefix, twin_addresses, mtu,
    renderer), without the GID policy (``gids``). Raises ValueError for an
    option out of bounds, DiscoveryError when the port or its netdevs are not
    found."""
    if not 8 <= p["prefix"] <= 30:
        raise ValueError("prefix must be between 8 and 30, not %d" % p["prefix"])
    if not 1280 <= p["mtu"] <= 9978:
        raise ValueError("mtu must be between 1280 and 9978, not %d" % p["mtu"])
    devices = fabric.scan(p["sysfs_infiniband"], p["sysfs_net"], p["port"])
    try:
        twins, note = fabric.find_cabled_port(devices, p["hca_hint"])
    except ValueError as exc:
        raise DiscoveryError("%s (under %s)" % (exc, p["sysfs_infiniband"]), {"devices": devices})
    missing = [d["name"] for d in twins if not d["netdev"]]
    if missing:
        raise DiscoveryError("no netdev found for %s" % ", ".join(missing), {"devices": devices})
    try:
        addresses = fabric.plan_addresses(p["address"], p["prefix"], len(twins), p["twin_addresses"])
    except ValueError as exc:
        raise DiscoveryError("cannot plan the twins' addresses: %s" % exc, {"devices": devices})
    result = dict(
        devices=devices, twins=twins,
        hcas=[d["name"] for d in twins], netdevs=[d["netdev"] for d in twins],
        addresses=addresses, hardware=all(d["pci"] for d in twins),
        netplan=fabric.render_netplan(twins, addresses, p["mtu"], p["renderer"]),
        gid_policy=None, gid_checks=[], gid_indexes=[], nccl_env={"NCCL_IB_HCA": fabric.nccl_ib_hca(twins)},
    )
    if note:
        result["note"] = note
    return result


def gids(sysfs_infiniband, result, mode):
    """Work out the GID policy into ``result``; returns the failure message when none fits, else None."""
    policy, env, checks = fabric.choose_gid_policy(sysfs_infiniband, result["twins"], result["addresses"], mode)
    result.update(gid_policy=policy, gid_checks=checks, gid_indexes=[c["wanted_index"] for c in checks])
    if policy is None:
        return "No GID policy (%s) gives NCCL the RoCE v2 GID of each twin's address: %s" % (mode, "; ".join(
            "%s wants %s (RoCE v2 GID index %s), NCCL would pick %s (%s, %s)" % (
                c["device"], c["address"], c["wanted_index"], c["nccl_index"], c["nccl_gid"], c["nccl_gid_type"])
            for c in checks))
    result["nccl_env"].update(env)
    return None


def parse_ip_addresses(text):
    """{netdev: [a.b.c.d/prefix, ...]} from `ip -4 -o addr show`."""
    found = {}
    for line in (text or "").splitlines():
        match = IP_ADDR_RE.match(line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def read_link(sysfs_net, netdev, ipv4):
    """One twin's netdev as read: mtu (int or None), operstate, admin_up
    (IFF_UP of its flags; None when unreadable) and its IPv4 addresses
    (``ipv4``: parse_ip_addresses' result)."""
    base = os.path.join(sysfs_net, netdev)
    mtu, flags = read_sysfs(os.path.join(base, "mtu")), read_sysfs(os.path.join(base, "flags"))
    try:
        admin_up = bool(int(flags, 16) & IFF_UP) if flags else None
    except ValueError:
        admin_up = None
    return {"netdev": netdev, "present": os.path.isdir(base),
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "operstate": read_sysfs(os.path.join(base, "operstate")),
            "admin_up": admin_up, "addresses": list(ipv4.get(netdev, []))}


def link_differences(link, address, mtu):
    """The lines saying how one twin's netdev (read_link) differs from what
    the netplan document sets (``address``, ``mtu``); [] when as wanted."""
    name = link["netdev"]
    if not link["present"]:
        return ["%s: no such netdev" % name]
    lines = []
    if link["mtu"] != int(mtu):
        lines.append("%s: MTU %s, wanted %d" % (name, link["mtu"], int(mtu)))
    if link["admin_up"] is False:
        lines.append("%s: administratively down, wanted up" % name)
    wanted = ipaddress.IPv4Interface(address)
    if not any(ipaddress.IPv4Interface(a) == wanted for a in link["addresses"]):
        lines.append("%s: does not carry %s (has: %s)" % (name, address, ", ".join(link["addresses"]) or "none"))
    return lines


def checksum(data):
    return hashlib.sha256(data).hexdigest() if data is not None else None


def compare(result, sysfs_net, netplan_file, ip_text, mtu):
    """What the probe adds to ``result`` (discover's): ``links`` (each
    twin's netdev as read, with its ``summary`` and ``differences``), the
    netplan file's and the document's sha256, ``netplan_managed`` (the twins are PCI devices: on a fake tree the role
    leaves netplan alone and nothing here is a difference),
    ``netplan_exists``, ``netplan_write`` (the file is not the document),
    ``netplan_apply`` (written, or a twin's netdev differs from it),
    ``differences`` and ``netplan_current`` (the file's text when the role
    applies: its rollback copy; else None)."""
    ipv4 = parse_ip_addresses(ip_text)
    links = [read_link(sysfs_net, netdev, ipv4) for netdev in result["netdevs"]]
    for link in links:
        link["summary"] = describe_link(link)
    current = read_bytes(netplan_file)
    wanted = result["netplan"].encode("utf-8")
    managed = bool(result["hardware"])
    differences = []
    write = managed and current != wanted
    if write:
        differences.append("%s: %s, to write" % (
            netplan_file, "missing" if current is None else "sha256 %s, wanted %s (the twins' document)"
            % (checksum(current)[:12], checksum(wanted)[:12])))
    for link, address in zip(links, result["addresses"]):
        link["differences"] = link_differences(link, address, mtu) if managed else []
        differences += link["differences"]
    result.update(
        links=links, netplan_managed=managed, netplan_exists=current is not None,
        netplan_checksum=checksum(current), netplan_wanted_checksum=checksum(wanted),
        netplan_write=write, netplan_apply=bool(differences), differences=differences,
        netplan_current=current.decode("utf-8", "replace") if differences and current is not None else None)
    return result


def describe_link(link):
    """A twin's netdev in a few words, for the role's messages."""
    if not link["present"]:
        return "%s: no such netdev" % link["netdev"]
    return "%s: MTU %s, %s%s, inet %s" % (
        link["netdev"], link["mtu"], link["operstate"] or "state unreadable",
        ", administratively down" if link["admin_up"] is False else "", ", ".join(link["addresses"]) or "none")


def discovery_options():
    """The argument spec rdma_netdev_info and fabric_probe share (doc fragment laguna.spark.fabric_discovery)."""
    return dict(
        sysfs_infiniband=dict(type="path", default="/sys/class/infiniband"),
        sysfs_net=dict(type="path", default="/sys/class/net"),
        port=dict(type="int", default=1),
        hca_hint=dict(type="str"),
        address=dict(type="str", required=True),
        prefix=dict(type="int", default=24),
        twin_addresses=dict(type="list", elements="str", default=[]),
        mtu=dict(type="int", default=9000),
        renderer=dict(type="str"),
        gid_policy=dict(type="str", default="auto", choices=["auto", "nccl", "pinned", "range"]),
        check_gids=dict(type="bool", default=True),
    )
