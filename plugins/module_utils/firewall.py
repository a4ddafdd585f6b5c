# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Ray's ports reachable only from the cluster's own nodes: one nftables table.

The table (``inet laguna_spark`` by default) has one base chain on the input
hook, ``priority filter - 5`` (before ufw's and most users' chains) with
``policy accept``: it only ever refuses. A packet it accepts still goes
through every other table's chains, so it never admits what ufw or the
user's own rules refuse, and it never touches another table.

Its rules: loopback and replies to the node's own connections pass; the
guarded TCP ports (the GCS port, each port Ray's processes listen on, the
workers' range) are accepted from the cluster's addresses (each node's
management address and its RoCE twins' addresses) and ``extra_sources`` and
answered with a TCP reset from anywhere else; optionally the same pair for
the API port. UDP is not touched (Ray talks TCP), nor is any other port:
NCCL's and Gloo's ephemeral ports between the nodes stay open.

The script is rendered here, deterministically (sorted, deduplicated sets),
and replaces the table atomically under ``nft -f``: it declares the table,
deletes it and defines it again, so it loads whether or not the table exists.
A short sha256 of the script is the table's comment, and the comment of its
first rule too, since nft before 1.0.8 (Debian bookworm's 1.0.6) leaves table
comments out of ``nft -j list`` while it shows rule comments. The live table
is current when that comment and the number of rules match.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import socket

from ansible_collections.laguna.spark.plugins.module_utils import fabric

MARK = "laguna-spark"
CHAIN = "input"
# Twins of the cabled CX7 port on a DGX Spark (fabric.plan_addresses's count).
TWINS = 2
TABLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
PORT_RE = re.compile(r"^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$")
# What `nft list table` says on stderr for a table that is not there.
MISSING_TABLE = "No such file or directory"
_PLACEHOLDER = "@@DIGEST@@"


def missing_nft(nft, node):
    """What a user reads when the nft binary is not on the node."""
    return ("%s: nft not found on %s. The firewall role loads its rules with nft, from the package nftables: "
            "install it (apt install nftables), or set firewall_enabled: false, and then nothing keeps Ray's "
            "ports from anyone on the network: close them to all but the cluster's nodes yourself."
            % (nft, node))


# --- ports ---------------------------------------------------------------

def parse_port(item):
    """(low, high) of a port (``6379``) or a range (``10002-19999``); ValueError names the item."""
    match = PORT_RE.match(str(item))
    if not match:
        raise ValueError("%r is not a port (6379) or a range of ports (10002-19999)" % (item,))
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if not 1 <= low <= 65535 or not 1 <= high <= 65535:
        raise ValueError("%r: ports are 1 to 65535" % (item,))
    if low > high:
        raise ValueError("%r: the range's first port is above its last" % (item,))
    return low, high


def merge_ports(items):
    """Sorted (low, high) intervals of the items; overlapping ones merged (nft refuses overlaps)."""
    merged = []
    for low, high in sorted(parse_port(item) for item in items):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def ray_ports(ray_port=None, ports=None):
    """The guarded ports of Ray as strings: the GCS port and every value of
    ``ports`` (laguna_ray_ports), with ``min_worker``..``max_worker`` as one range."""
    out = [] if ray_port is None else [str(ray_port)]
    ports = dict(ports or {})
    low, high = ports.pop("min_worker", None), ports.pop("max_worker", None)
    if (low is None) != (high is None):
        given, missing = ("min_worker", "max_worker") if high is None else ("max_worker", "min_worker")
        raise ValueError("ray_ports has %s without %s" % (given, missing))
    for name in sorted(ports):
        try:
            parse_port(ports[name])
        except ValueError as exc:
            raise ValueError("ray_ports.%s: %s" % (name, exc))
        out.append(str(ports[name]).strip())
    if low is not None:
        try:
            parse_port("%s-%s" % (low, high))
        except ValueError as exc:
            raise ValueError("ray_ports.min_worker..max_worker: %s" % exc)
        out.append("%s-%s" % (str(low).strip(), str(high).strip()))
    return out


def monitoring_ports(monitoring, ports=None):
    """The guarded ports of the monitoring role (laguna_monitoring_ports, by name) as strings,
    sorted by name; none unless ``monitoring`` (laguna_monitoring) is on."""
    if not monitoring:
        return []
    out = []
    for name in sorted(ports or {}):
        try:
            parse_port(ports[name])
        except ValueError as exc:
            raise ValueError("monitoring_ports.%s: %s" % (name, exc))
        out.append(str(ports[name]).strip())
    return out


def _port_text(interval):
    low, high = interval
    return str(low) if low == high else "%d-%d" % (low, high)


# --- addresses -------------------------------------------------------------

def parse_source(item):
    """An ip_network of an address or a CIDR (host bits cleared), or None when it is neither."""
    text = str(item).strip()
    if "%" in text:  # a scoped IPv6 address (fe80::1%eth0): the scope is no part of a source
        text = text.split("%", 1)[0]
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def sources(items, what):
    """ip_networks of addresses and CIDRs; ValueError names ``what`` and the item."""
    out = []
    for item in items or []:
        if isinstance(item, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            out.append(item)
            continue
        network = parse_source(item)
        if network is None:
            raise ValueError("%s: %r is not an IPv4 or IPv6 address or CIDR" % (what, item))
        out.append(network)
    return out


def resolve(name, getaddrinfo=socket.getaddrinfo):
    """Every address a host name resolves to on this node (IPv4 and IPv6); OSError when none."""
    found = []
    for family, _type, _proto, _canon, sockaddr in getaddrinfo(name, None, 0, socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6):
            found.append(str(sockaddr[0]).split("%", 1)[0])
    if not found:
        raise OSError("no IPv4 or IPv6 address")
    return sorted(set(found))


def twin_addresses(roce_ip, prefix, explicit=None):
    """The host addresses of a node's RoCE twins, as the fabric role plans them:
    the RoCE address and the next subnet's for the Spark's second twin, or the
    addresses given per twin (fabric_twin_addresses)."""
    explicit = [str(a) for a in explicit or []]
    count = len(explicit) if explicit else TWINS
    planned = fabric.plan_addresses(str(roce_ip), int(prefix), count, explicit)
    return sorted({str(ipaddress.IPv4Interface(a).ip) for a in planned} | {str(ipaddress.IPv4Address(roce_ip))},
                  key=ipaddress.IPv4Address)


def cluster_nodes(hosts, hostvars, default_prefix=24):
    """The firewall role's ``cluster`` (firewall_cluster): one entry per node, as cluster_sources() takes it.

    ``hostvars`` maps each host to its variables (the play's hostvars): the
    management address is its ``ansible_host`` (the host name when unset,
    resolved on the node), ``roce_ip`` its ``laguna_roce_ip`` ("" when
    unset), ``roce_prefix`` its ``fabric_prefix`` (``default_prefix`` when
    unset) and ``twin_addresses`` its ``fabric_twin_addresses`` ([] when
    unset), as the fabric role plans its twins. Only those variables are read.
    """
    out = []
    for host in hosts or []:
        node = hostvars[host]
        out.append({"name": host,
                    "addresses": [str(node["ansible_host"] if "ansible_host" in node else host)],
                    "roce_ip": str(node["laguna_roce_ip"] if "laguna_roce_ip" in node else ""),
                    "roce_prefix": int(node["fabric_prefix"] if "fabric_prefix" in node else default_prefix),
                    "twin_addresses": node["fabric_twin_addresses"] if "fabric_twin_addresses" in node else []})
    return out


def cluster_sources(cluster, roce_prefix=24, getaddrinfo=socket.getaddrinfo):
    """ip_networks of every cluster node's addresses.

    Each entry is ``{name, addresses, roce_ip, roce_prefix, twin_addresses}``:
    ``addresses`` are literals, CIDRs or host names (resolved here, on the
    node); ``roce_ip`` adds the node's twins' addresses. ValueError names the
    host and what is wrong.
    """
    out = []
    for entry in cluster or []:
        host = entry.get("name") or "?"
        for item in entry.get("addresses") or []:
            network = parse_source(item)
            if network is not None:
                out.append(network)
                continue
            try:
                out.extend(ipaddress.ip_network(a) for a in resolve(str(item), getaddrinfo))
            except (OSError, UnicodeError) as exc:
                raise ValueError("cluster host %s: %s does not resolve on this node (%s); put its address in "
                                 "the inventory (ansible_host) or in /etc/hosts" % (host, item, exc))
        if entry.get("roce_ip"):
            prefix = entry.get("roce_prefix") or roce_prefix
            try:
                out.extend(ipaddress.ip_network(a) for a in
                           twin_addresses(entry["roce_ip"], prefix, entry.get("twin_addresses")))
            except ValueError as exc:
                raise ValueError("cluster host %s: RoCE address %s/%s, twins %s: %s"
                                 % (host, entry["roce_ip"], prefix, list(entry.get("twin_addresses") or []), exc))
    return out


def collapse(networks):
    """(ipv4, ipv6): each family's networks sorted, duplicates and networks inside another dropped.

    Adjacent networks stay apart (192.168.100.1 and .2 are listed as they are);
    only containment is removed, since nft refuses overlapping set elements.
    """
    by_family = {4: set(), 6: set()}
    for network in networks:
        by_family[network.version].add(network)
    out = []
    for version in (4, 6):
        items = sorted(by_family[version], key=lambda n: (n.network_address, n.prefixlen))
        kept = [n for n in items if not any(o != n and n.subnet_of(o) for o in items)]
        out.append(kept)
    return out[0], out[1]


def _net_text(network):
    return str(network.network_address) if network.prefixlen == network.max_prefixlen else str(network)


# --- the script ------------------------------------------------------------

def _set(name, kind, elements, interval):
    lines = ["\tset %s {" % name, "\t\ttype %s" % kind]
    if interval:
        lines.append("\t\tflags interval")
    lines += ["\t\telements = { %s }" % ", ".join(elements), "\t}", ""]
    return lines


def _source_sets(prefix, networks):
    """Set lines and (family keyword, set name) pairs for the non-empty families."""
    v4, v6 = collapse(networks)
    lines, matches = [], []
    for family, kind, items in (("ip", "ipv4_addr", v4), ("ip6", "ipv6_addr", v6)):
        if not items:
            continue
        name = "%s_v%s" % (prefix, "4" if family == "ip" else "6")
        interval = any(n.prefixlen != n.max_prefixlen for n in items)
        lines += _set(name, kind, [_net_text(n) for n in items], interval)
        matches.append((family, name))
    return lines, matches


def render(table, ports, cluster=(), extra=(), api_port=None, api_sources=()):
    """The nft script for the table, its digest and its number of rules.

    ``ports``: guarded ports and ranges (strings); ``cluster`` and ``extra``:
    ip_networks (or address/CIDR strings) admitted to them; ``api_sources``
    non-empty: the API port is admitted only from them and the cluster.
    Returns dict(text, digest, comment, rules, ports, sources, api_sources).
    """
    if not TABLE_RE.match(table or ""):
        raise ValueError("table %r: a letter, then letters, digits or _ (at most 64)" % (table,))
    guarded = merge_ports(ports)
    if not guarded:
        raise ValueError("no port to guard")
    cluster = sources(cluster, "cluster")
    extra = sources(extra, "extra_sources")
    api = sources(api_sources, "api_sources")
    if api and api_port is None:
        raise ValueError("api_sources without api_port")
    if api:
        parse_port(api_port)
        inside = [p for p in guarded if p[0] <= int(api_port) <= p[1]]
        if inside:
            raise ValueError("api_port %s is one of the guarded ports (%s)" % (api_port, _port_text(inside[0])))

    lines = [
        "# Managed by laguna.spark (role firewall, module firewall_rules): edits are",
        "# undone by the next run. Loaded at boot by laguna-spark-firewall.service.",
        "#",
        "# Ray's TCP ports answer only the cluster's own nodes (and loopback); anyone",
        "# else gets a TCP reset. Policy accept: this table only refuses; what it",
        "# accepts still goes through every other table (ufw's, the user's), and",
        "# `nft -f` of this file replaces this table alone, whether or not it exists.",
        "table inet %s {}" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
        '\tcomment "%s %s"' % (MARK, _PLACEHOLDER),
        "",
    ]
    lines += _set("ray_ports", "inet_service", [_port_text(p) for p in guarded],
                  any(low != high for low, high in guarded))
    set_lines, allowed = _source_sets("cluster", cluster + extra)
    lines += set_lines
    rules = [
        'iif "lo" accept comment "%s %s"' % (MARK, _PLACEHOLDER),
        "ct state established,related accept",
    ]
    rules += ["tcp dport @ray_ports %s saddr @%s accept" % pair for pair in allowed]
    rules.append("tcp dport @ray_ports reject with tcp reset")
    if api:
        set_lines, api_allowed = _source_sets("api", cluster + api)
        lines += set_lines
        rules += ["tcp dport %d %s saddr @%s accept" % ((int(api_port),) + pair) for pair in api_allowed]
        rules.append("tcp dport %d reject with tcp reset" % int(api_port))
    lines += ["\tchain %s {" % CHAIN, "\t\ttype filter hook input priority filter - 5; policy accept;"]
    lines += ["\t\t" + rule for rule in rules]
    lines += ["\t}", "}", ""]
    text = "\n".join(lines)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    v4, v6 = collapse(cluster + extra)
    a4, a6 = collapse(cluster + api) if api else ([], [])
    return dict(
        text=text.replace(_PLACEHOLDER, digest),
        digest=digest,
        comment="%s %s" % (MARK, digest),
        rules=len(rules),
        ports=[_port_text(p) for p in guarded],
        sources=[_net_text(n) for n in v4 + v6],
        api_sources=[_net_text(n) for n in a4 + a6],
    )


# --- the live table --------------------------------------------------------

def parse_live(text, table, chain=CHAIN):
    """What ``nft -j list table inet <table>`` shows of it.

    dict(present, comment, rules, hooked): the table's comment (or, from nft
    before 1.0.8, the comment of its first rule that carries the mark), the
    number of rules in its chain and whether that chain is on the input hook.
    ValueError when the text is not nft's JSON.
    """
    try:
        data = json.loads(text)
        items = data["nftables"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError("not nft's JSON (%s): %s" % (exc, str(text)[:200]))
    state = dict(present=False, comment=None, rules=0, hooked=False)
    marks = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if "table" in item:
            obj = item["table"]
            if obj.get("family") == "inet" and obj.get("name") == table:
                state["present"] = True
                state["comment"] = obj.get("comment")
        elif "chain" in item:
            obj = item["chain"]
            if obj.get("table") == table and obj.get("name") == chain:
                state["hooked"] = obj.get("hook") == "input" and obj.get("type") == "filter"
        elif "rule" in item:
            obj = item["rule"]
            if obj.get("table") == table and obj.get("chain") == chain:
                state["rules"] += 1
                if str(obj.get("comment") or "").startswith(MARK + " "):
                    marks.append(obj["comment"])
    if state["present"] and state["comment"] is None and marks:
        state["comment"] = marks[0]
    return state


def is_current(live, wanted):
    """The live table is the wanted one (its comment, its chain on the hook, its number of rules)."""
    return (live["present"] and live["comment"] == wanted["comment"] and live["hooked"]
            and live["rules"] == wanted["rules"])


def read_live(run_command, nft, table):
    """(state, error) of the live table; a missing table is ``present: False``; error is "" on success."""
    rc, out, err = run_command([nft, "-j", "list", "table", "inet", table])
    if rc != 0:
        if MISSING_TABLE in err:
            return dict(present=False, comment=None, rules=0, hooked=False), ""
        return None, "%s -j list table inet %s failed (rc=%d): %s" % (nft, table, rc, (err or out).strip()[-800:])
    try:
        return parse_live(out, table), ""
    except ValueError as exc:
        return None, "%s -j list table inet %s: %s" % (nft, table, exc)


# --- the boot unit ---------------------------------------------------------
#
# The system unit that loads the rules file at every boot (the role's
# firewall_unit, laguna-spark-firewall.service): its text is rendered here,
# the file written only when it differs (mode 0644, root:root), systemd
# reloaded only then, and the unit enabled (not started: the module loads the
# table itself) only when `systemctl is-enabled` says it is not.

UNIT_DIR = "/etc/systemd/system"
UNIT_MODE = 0o644
UNIT_OWNER = (0, 0)
# `systemctl is-enabled` states with rc 0 that ansible.builtin.systemd_service
# (enabled: true) does not take as enabled, so runs `systemctl enable` for.
_ENABLE_AGAIN = ("enabled-runtime", "indirect", "alias")


def unit_text(nft, path, table):
    """The boot unit's text: what the role's laguna-spark-firewall.service.j2
    rendered (with ansible_managed "Ansible managed"), so that a node the
    template wrote keeps its file. ``nft``: the executable's full path."""
    lines = [
        "# Ansible managed",
        "# laguna.spark (role firewall): loads %s, the nftables table" % path,
        "# inet %s that keeps Ray's ports to the cluster's own nodes," % table,
        "# at every boot. The playbook loads it itself when it changes; this unit is",
        "# enabled, not started by it.",
        "#",
        "# Ordering, like nftables.service's own:",
        "# - After=nftables.service: its ExecStart (/etc/nftables.conf) starts with",
        "#   `flush ruleset`, which would wipe this table were it loaded first.",
        "#   PartOf= restarts this unit after nftables.service is restarted or",
        "#   reloaded for the same reason.",
        "# - After=ufw.service: ufw keeps to its own tables and would not wipe this",
        "#   one; after it, both are in place together, before network-pre.target.",
        "# - Before=network-pre.target and Wants= it (systemd.special(7): a firewall",
        "#   that must be in place before any interface is configured): no window in",
        "#   which Ray's ports could be reached from the network.",
        "# - DefaultDependencies=no: basic.target comes too late for that; without",
        "#   Conflicts=shutdown.target the table also stays until the very end of a",
        "#   shutdown instead of being removed while the raylets still run.",
        "[Unit]",
        "Description=laguna-spark: Ray's ports reachable only from the cluster's nodes (nftables table inet %s)"
        % table,
        "Documentation=man:nft(8)",
        "DefaultDependencies=no",
        "After=local-fs.target nftables.service ufw.service",
        "PartOf=nftables.service",
        "Before=network-pre.target",
        "Wants=network-pre.target",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ExecStart=%s -f %s" % (nft, path),
        "ExecReload=%s -f %s" % (nft, path),
        '# "-": stopping succeeds when the table is gone already (a `flush ruleset`).',
        "ExecStop=-%s delete table inet %s" % (nft, table),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def is_enabled(rc, out):
    """Whether ``systemctl is-enabled UNIT`` (rc, stdout) says the unit is enabled, as
    ansible.builtin.systemd_service reads it: rc 0, except enabled-runtime, indirect
    and alias; any other rc (disabled, masked, no such unit) is not enabled."""
    return rc == 0 and (out or "").strip() not in _ENABLE_AGAIN


def unit_file_state(before, stat, wanted, owner=UNIT_OWNER):
    """What the unit file needs: dict(write, attributes, file_changed).

    ``before``: its text (None when missing or not a regular file); ``stat``:
    (mode bits, uid, gid) of the path itself (lstat), None when missing;
    ``wanted``: the text. ``write``: the text (or a symlink in its place)
    differs; ``attributes``: only the mode (0644) or owner (root:root) does."""
    write = before != wanted or stat is None
    attributes = not write and tuple(stat) != (UNIT_MODE,) + tuple(owner)
    return dict(write=write, attributes=attributes, file_changed=write or attributes)


def unit_plan(file_state, enabled):
    """The boot unit's actions: dict(file_changed, daemon_reload, enable).

    systemd is reloaded when the file changes (as the enable task's
    ``daemon_reload: <unit file task> is changed`` did); the unit is enabled
    when ``systemctl is-enabled`` said it is not (a unit file not written yet
    is not enabled: check mode reports the enable as a change too)."""
    return dict(file_changed=file_state["file_changed"], daemon_reload=file_state["file_changed"],
                enable=not enabled)


def read_enabled(run_command, systemctl, name):
    """(enabled, state) of the unit from ``systemctl is-enabled``; state is its word
    (enabled, disabled, masked, ...) or its error when it printed none."""
    rc, out, err = run_command([systemctl, "is-enabled", name])
    state = (out or "").strip() or (err or "").strip()[-300:] or "rc=%d" % rc
    return is_enabled(rc, out), state


def apply_unit(run_command, systemctl, name, plan, write):
    """Carry out ``plan`` (unit_plan) in a real run: ``write()`` puts the file in
    place (text, mode, owner), then `systemctl daemon-reload`; then the unit is
    enabled if ``plan["enable"]`` or, after a write, `systemctl is-enabled` (read
    again: the new file's [Install] decides) says it is not. Returns (enabled
    now by this run, error): error is "" on success, else the message to fail
    with (ansible.builtin.systemd_service's wording)."""
    enable = plan["enable"]
    if plan["file_changed"]:
        write()
    if plan["daemon_reload"]:
        rc, out, err = run_command([systemctl, "daemon-reload"])
        if rc != 0:
            return False, "failure %d during daemon-reload: %s" % (rc, (err or out).strip())
        enable = not read_enabled(run_command, systemctl, name)[0]
    if not enable:
        return False, ""
    rc, out, err = run_command([systemctl, "enable", name])
    if rc != 0:
        return False, "Unable to enable service %s: %s" % (name, (out + err).strip())
    return True, ""
