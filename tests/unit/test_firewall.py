"""firewall / firewall_rules: Ray's ports reachable only from the cluster's own nodes.

The rendering, the ports, the cluster's addresses (host names, the RoCE
twins) and the parsing of `nft -j list table` are tested on module_utils
directly; the module runs in-process against a fake nft on PATH (argv
recorded, `-j list table` answered from a state file), then, where nft is
installed, the rendered file goes through the real `nft --check` and the
module runs the real nft in a private network namespace of its own (the
machine's ruleset is never touched).
"""

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import fabric, firewall
from ansible_collections.laguna.spark.plugins.modules import firewall_rules
from helpers import FIXTURES, ROOT
from helpers.fake_bin import on_path, python_script

RAY_PORTS = {"node_manager": 6380, "object_manager": 6381, "metrics_export": 6382, "dashboard_agent_grpc": 6383,
             "dashboard_agent_listen": 52365, "runtime_env_agent": 6384, "ray_client_server": 10001,
             "dashboard": 8265, "min_worker": 10002, "max_worker": 19999}
CLUSTER = [{"name": "spark-1", "addresses": ["10.0.0.11"], "roce_ip": "192.168.100.1"},
           {"name": "spark-2", "addresses": ["10.0.0.12"], "roce_ip": "192.168.100.2"}]

# `nft -j list table inet laguna_spark` of the table render(["6379", "10002-19999"],
# ["192.168.100.1", "192.168.100.2"]) makes, loaded by nft 1.0.6 (Debian
# bookworm): the table's comment is not in the JSON before nft 1.0.8, the
# first rule's is.
LIVE_106 = {"nftables": [
    {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
    {"table": {"family": "inet", "name": "laguna_spark", "handle": 2}},
    {"set": {"family": "inet", "name": "ray_ports", "table": "laguna_spark", "type": "inet_service", "handle": 2,
             "flags": ["interval"], "elem": [6379, {"range": [10002, 19999]}]}},
    {"set": {"family": "inet", "name": "cluster_v4", "table": "laguna_spark", "type": "ipv4_addr", "handle": 3,
             "elem": ["192.168.100.1", "192.168.100.2"]}},
    {"chain": {"family": "inet", "table": "laguna_spark", "name": "input", "handle": 1, "type": "filter",
               "hook": "input", "prio": -5, "policy": "accept"}},
    {"rule": {"family": "inet", "table": "laguna_spark", "chain": "input", "handle": 4,
              "comment": "laguna-spark 462a90e8b5d04c02",
              "expr": [{"match": {"op": "==", "left": {"meta": {"key": "iif"}}, "right": "lo"}}, {"accept": None}]}},
    {"rule": {"family": "inet", "table": "laguna_spark", "chain": "input", "handle": 5,
              "expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
                       {"accept": None}]}},
    {"rule": {"family": "inet", "table": "laguna_spark", "chain": "input", "handle": 6,
              "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                                  "right": "@ray_ports"}},
                       {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                                  "right": "@cluster_v4"}},
                       {"accept": None}]}},
    {"rule": {"family": "inet", "table": "laguna_spark", "chain": "input", "handle": 7,
              "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                                  "right": "@ray_ports"}},
                       {"reject": {"type": "tcp reset"}}]}},
]}


def live_109():
    """The same table as nft 1.0.9 (Ubuntu 24.04) lists it: the table object carries its comment."""
    data = json.loads(json.dumps(LIVE_106))
    data["nftables"][0]["metainfo"].update(version="1.0.9", release_name="Old Doc Yak #3")
    data["nftables"][1]["table"]["comment"] = "laguna-spark 462a90e8b5d04c02"
    del data["nftables"][5]["rule"]["comment"]
    return data


# --- ports -----------------------------------------------------------------

def test_ports_and_ranges_are_validated():
    assert firewall.parse_port("6379") == (6379, 6379)
    assert firewall.parse_port(" 10002 - 19999 ") == (10002, 19999)
    assert firewall.parse_port(8000) == (8000, 8000)
    for bad, why in (("0", "1 to 65535"), ("65536", "1 to 65535"), ("1-70000", "1 to 65535"),
                     ("20-10", "first port is above its last"), ("ssh", "is not a port"), ("1-2-3", "is not a port"),
                     ("", "is not a port")):
        with pytest.raises(ValueError, match=why):
            firewall.parse_port(bad)


def test_ray_ports_guard_every_value_with_the_workers_as_one_range():
    ports = firewall.ray_ports(6379, RAY_PORTS)
    assert sorted(ports) == sorted(["6379", "6380", "6381", "6382", "6383", "52365", "6384", "10001", "8265",
                                    "10002-19999"])
    assert firewall.ray_ports(None, {}) == [] and firewall.ray_ports(6379, None) == ["6379"]
    with pytest.raises(ValueError, match="min_worker without max_worker"):
        firewall.ray_ports(6379, {"min_worker": 10002})
    with pytest.raises(ValueError, match="ray_ports.dashboard: 70000: ports are 1 to 65535"):
        firewall.ray_ports(6379, {"dashboard": 70000})
    with pytest.raises(ValueError, match="min_worker..max_worker: '20000-10000'"):
        firewall.ray_ports(6379, {"min_worker": 20000, "max_worker": 10000})


def test_overlapping_ports_merge_and_single_ports_stay_single():
    assert firewall.merge_ports(["6379", "6379", "10002-19999", "10005", "19990-20010", "6380"]) == [
        (6379, 6379), (6380, 6380), (10002, 20010)]
    singles = firewall.render("laguna_spark", ["6380", "6379"], ["10.0.0.1"])
    assert "\t\ttype inet_service\n\t\telements = { 6379, 6380 }\n" in singles["text"]
    ranged = firewall.render("laguna_spark", ["6379", "10002-19999", "6379"], ["10.0.0.1"])
    assert "\t\ttype inet_service\n\t\tflags interval\n\t\telements = { 6379, 10002-19999 }\n" in ranged["text"]
    assert ranged["ports"] == ["6379", "10002-19999"]
    with pytest.raises(ValueError, match="no port to guard"):
        firewall.render("laguna_spark", [], ["10.0.0.1"])


# --- rendering -----------------------------------------------------------

def test_the_script_replaces_the_table_whole_and_refuses_strangers():
    wanted = firewall.render("laguna_spark", ["6379", "10002-19999"], ["192.168.100.1", "192.168.100.2"])
    text = wanted["text"]
    lines = text.splitlines()
    first = [i for i, line in enumerate(lines) if line.startswith("table") or line.startswith("delete")]
    assert [lines[i] for i in first] == ["table inet laguna_spark {}", "delete table inet laguna_spark",
                                         "table inet laguna_spark {"]
    assert '\tcomment "laguna-spark %s"\n' % wanted["digest"] in text
    assert wanted["comment"] == "laguna-spark " + wanted["digest"] and len(wanted["digest"]) == 16
    assert ("\tchain input {\n"
            "\t\ttype filter hook input priority filter - 5; policy accept;\n"
            '\t\tiif "lo" accept comment "laguna-spark %s"\n'
            "\t\tct state established,related accept\n"
            "\t\ttcp dport @ray_ports ip saddr @cluster_v4 accept\n"
            "\t\ttcp dport @ray_ports reject with tcp reset\n"
            "\t}\n}\n" % wanted["digest"]) in text
    assert wanted["rules"] == 4
    assert "udp" not in text and "flush" not in text and "drop" not in text
    assert "cluster_v6" not in text  # no IPv6 source: no empty set


def test_sources_are_split_by_family_sorted_and_deduplicated():
    cluster = ["192.168.100.2", "192.168.100.1", "192.168.100.2", "fd00::2", "FD00::1", "fe80::1%eth0"]
    extra = ["10.9.0.0/16", "10.9.3.4", "10.9.0.7/16", "2001:db8::/64", "192.168.100.1/32"]
    wanted = firewall.render("laguna_spark", ["6379"], cluster, extra)
    assert ("\tset cluster_v4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n"
            "\t\telements = { 10.9.0.0/16, 192.168.100.1, 192.168.100.2 }\n\t}\n") in wanted["text"]
    assert ("\tset cluster_v6 {\n\t\ttype ipv6_addr\n\t\tflags interval\n"
            "\t\telements = { 2001:db8::/64, fd00::1, fd00::2, fe80::1 }\n\t}\n") in wanted["text"]
    assert "\t\ttcp dport @ray_ports ip6 saddr @cluster_v6 accept\n" in wanted["text"]
    assert wanted["sources"] == ["10.9.0.0/16", "192.168.100.1", "192.168.100.2", "2001:db8::/64", "fd00::1",
                                 "fd00::2", "fe80::1"]
    plain = firewall.render("laguna_spark", ["6379"], ["10.0.0.2", "10.0.0.1"])
    assert "\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1, 10.0.0.2 }\n" in plain["text"]  # no CIDR: no interval
    with pytest.raises(ValueError, match="extra_sources: 'spark-3.local' is not an IPv4 or IPv6 address or CIDR"):
        firewall.render("laguna_spark", ["6379"], cluster, ["spark-3.local"])
    with pytest.raises(ValueError, match="table 'laguna-spark'"):
        firewall.render("laguna-spark", ["6379"], cluster)


def test_api_sources_guard_the_api_port_only_when_given():
    open_api = firewall.render("laguna_spark", ["6379"], ["10.0.0.1"], api_port=8000)
    assert "8000" not in open_api["text"] and open_api["api_sources"] == []
    guarded = firewall.render("laguna_spark", ["6379"], ["10.0.0.1", "fd00::1"], ["10.5.0.9"], api_port=8000,
                              api_sources=["192.0.2.0/24", "192.0.2.7"])
    text = guarded["text"]
    assert ("\tset api_v4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n"
            "\t\telements = { 10.0.0.1, 192.0.2.0/24 }\n\t}\n") in text  # the cluster's, not extra_sources
    assert ("\t\ttcp dport 8000 ip saddr @api_v4 accept\n"
            "\t\ttcp dport 8000 ip6 saddr @api_v6 accept\n"
            "\t\ttcp dport 8000 reject with tcp reset\n\t}\n") in text
    assert guarded["rules"] == 8 and guarded["api_sources"] == ["10.0.0.1", "192.0.2.0/24", "fd00::1"]
    with pytest.raises(ValueError, match="api_port 8265 is one of the guarded ports"):
        firewall.render("laguna_spark", ["6379", "8265"], ["10.0.0.1"], api_port=8265, api_sources=["10.1.0.0/16"])
    with pytest.raises(ValueError, match="api_sources without api_port"):
        firewall.render("laguna_spark", ["6379"], ["10.0.0.1"], api_sources=["10.1.0.0/16"])


def test_the_digest_is_deterministic_and_follows_the_rules():
    one = firewall.render("laguna_spark", ["10002-19999", "6379"], ["10.0.0.2", "10.0.0.1"], ["fd00::/64"])
    two = firewall.render("laguna_spark", ["6379", "10002-19999", "6379"], ["10.0.0.1", "10.0.0.2", "10.0.0.1"],
                          ["fd00::0/64"])
    assert one["text"] == two["text"] and one["digest"] == two["digest"]
    assert one["text"].count(one["comment"]) == 2
    other = firewall.render("laguna_spark", ["6379", "10002-19999"], ["10.0.0.1", "10.0.0.3"], ["fd00::/64"])
    assert other["digest"] != one["digest"]
    renamed = firewall.render("laguna_other", ["6379", "10002-19999"], ["10.0.0.1", "10.0.0.2"], ["fd00::/64"])
    assert renamed["digest"] != one["digest"] and "laguna_spark" not in renamed["text"]


# --- the cluster's addresses ---------------------------------------------

def test_each_node_brings_its_twins_addresses_as_the_fabric_role_plans_them():
    assert firewall.twin_addresses("192.168.100.2", 24) == ["192.168.100.2", "192.168.101.2"]
    assert [str(ipaddress.IPv4Interface(a).ip) for a in fabric.plan_addresses("10.0.0.1", 30, 2)] == \
        firewall.twin_addresses("10.0.0.1", 30) == ["10.0.0.1", "10.0.0.5"]
    assert firewall.twin_addresses("192.168.100.1", 24, ["192.168.100.1/24", "192.168.150.1"]) == [
        "192.168.100.1", "192.168.150.1"]
    assert firewall.twin_addresses("10.1.1.1", 24, ["10.1.1.1"]) == ["10.1.1.1"]  # a port with one twin
    cluster = CLUSTER + [{"name": "spark-3", "roce_ip": "10.0.0.1", "roce_prefix": 30, "twin_addresses": []}]
    found = sorted(str(n) for n in firewall.cluster_sources(cluster, 24))
    assert found == ["10.0.0.1/32", "10.0.0.11/32", "10.0.0.12/32", "10.0.0.5/32", "192.168.100.1/32",
                     "192.168.100.2/32", "192.168.101.1/32", "192.168.101.2/32"]
    with pytest.raises(ValueError, match=r"cluster host spark-9: RoCE address 192.168.1.300/24"):
        firewall.cluster_sources([{"name": "spark-9", "roce_ip": "192.168.1.300"}])


def test_the_cluster_is_read_from_each_nodes_own_variables_only():
    hostvars = {"spark-1": {"ansible_host": "10.0.0.11", "laguna_roce_ip": "192.168.100.1", "fabric_prefix": "30",
                            "vllm_serve_api_key": "secret"},
                "spark-2": {"laguna_roce_ip": "192.168.100.2", "fabric_twin_addresses": ["192.168.150.2"]},
                "spark-3": {}}
    nodes = firewall.cluster_nodes(["spark-2", "spark-1", "spark-3"], hostvars, default_prefix=24)
    assert nodes == [
        {"name": "spark-2", "addresses": ["spark-2"], "roce_ip": "192.168.100.2", "roce_prefix": 24,
         "twin_addresses": ["192.168.150.2"]},
        {"name": "spark-1", "addresses": ["10.0.0.11"], "roce_ip": "192.168.100.1", "roce_prefix": 30,
         "twin_addresses": []},
        {"name": "spark-3", "addresses": ["spark-3"], "roce_ip": "", "roce_prefix": 24, "twin_addresses": []}]
    assert "secret" not in repr(nodes)
    # What the module makes of them.
    found = sorted(str(n) for n in firewall.cluster_sources(nodes[1:2]))
    assert found == ["10.0.0.11/32", "192.168.100.1/32", "192.168.100.5/32"]


def test_the_cluster_filter_names_a_host_not_in_the_inventory():
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel

    hostvars = {"spark-1": {"laguna_roce_ip": "192.168.100.1"}}
    nodes, unknown, not_a_list = run_filter("firewall_cluster", "firewall_cluster", [
        [["spark-1"], hostvars, 16], [["spark-1", "spark-9"], hostvars], ["spark-1", hostvars]])
    assert nodes == [{"name": "spark-1", "addresses": ["spark-1"], "roce_ip": "192.168.100.1", "roce_prefix": 16,
                      "twin_addresses": []}]
    assert unknown.startswith("Ansible") and unknown.endswith("firewall_cluster: spark-9 is not in the inventory")
    assert "the input must be a list of inventory host names" in not_a_list


def _fake_getaddrinfo(table):
    def getaddrinfo(name, port, family=0, type=0):
        if name not in table:
            raise socket.gaierror(-2, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, 0, 0, 0) if ":" in a else (a, 0)) for a in table[name]]
    return getaddrinfo


def test_host_names_resolve_on_the_node_and_one_that_does_not_fails_naming_it():
    getaddrinfo = _fake_getaddrinfo({"spark-1.local": ["10.0.0.11", "fd00::11%enp1s0", "10.0.0.11"]})
    cluster = [{"name": "spark-1", "addresses": ["spark-1.local", "10.0.0.99"]}]
    assert sorted(str(n) for n in firewall.cluster_sources(cluster, getaddrinfo=getaddrinfo)) == [
        "10.0.0.11/32", "10.0.0.99/32", "fd00::11/128"]
    cluster = [{"name": "spark-2", "addresses": ["spark-2.local"]}]
    with pytest.raises(ValueError, match=r"cluster host spark-2: spark-2.local does not resolve on this node "
                                         r"\(.*Name or service not known\)"):
        firewall.cluster_sources(cluster, getaddrinfo=getaddrinfo)
    assert "127.0.0.1" in firewall.resolve("localhost")  # the real resolver


# --- the live table --------------------------------------------------------

def test_the_live_table_is_read_from_nfts_json_old_and_new():
    wanted = firewall.render("laguna_spark", ["6379", "10002-19999"], ["192.168.100.1", "192.168.100.2"])
    assert wanted["digest"] == "462a90e8b5d04c02"  # the sample's digest: the rendering did not move
    for sample in (LIVE_106, live_109()):
        live = firewall.parse_live(json.dumps(sample), "laguna_spark")
        assert live == {"present": True, "comment": "laguna-spark 462a90e8b5d04c02", "rules": 4, "hooked": True}
        assert firewall.is_current(live, wanted)
    other = firewall.render("laguna_spark", ["6379"], ["192.168.100.1"])
    assert not firewall.is_current(firewall.parse_live(json.dumps(LIVE_106), "laguna_spark"), other)
    flushed = json.loads(json.dumps(live_109()))
    flushed["nftables"] = [item for item in flushed["nftables"] if "rule" not in item]  # nft flush chain
    live = firewall.parse_live(json.dumps(flushed), "laguna_spark")
    assert live["rules"] == 0 and not firewall.is_current(live, wanted)
    assert firewall.parse_live(json.dumps(LIVE_106), "other")["present"] is False
    with pytest.raises(ValueError, match="not nft's JSON"):
        firewall.parse_live("Error: syntax error", "laguna_spark")


def test_read_live_tells_a_missing_table_from_an_error():
    def run(stderr, rc=1, out=""):
        return lambda argv: (rc, out, stderr)
    missing = "Error: No such file or directory\nlist table inet laguna_spark\n                ^^^^^^^^^^^^\n"
    assert firewall.read_live(run(missing), "nft", "laguna_spark") == (
        {"present": False, "comment": None, "rules": 0, "hooked": False}, "")
    state, error = firewall.read_live(run("Error: Operation not permitted (you must be root)"), "nft", "laguna_spark")
    assert state is None and "failed (rc=1): Error: Operation not permitted (you must be root)" in error
    state, error = firewall.read_live(run("", 0, json.dumps(live_109())), "/usr/sbin/nft", "laguna_spark")
    assert error == "" and state["present"] and state["rules"] == 4


# --- the module, against a fake nft -----------------------------------------

FAKE_NFT = r'''
import json, os, re, sys

state_path = os.environ["FAKE_NFT_STATE"]
state = json.load(open(state_path)) if os.path.exists(state_path) else {"tables": {}, "calls": []}
args = sys.argv[1:]
state["calls"].append(args)


def save():
    with open(state_path, "w") as handle:
        json.dump(state, handle)


def load(path):
    text = open(path).read()
    name = re.findall(r"^table inet (\w+) \{$", text, re.M)[0]
    comment = re.search(r'comment "(laguna-spark [0-9a-f]+)"', text).group(1)
    chain = text.split("policy accept;\n", 1)[1].split("\t}\n", 1)[0]
    return name, {"comment": comment, "rules": len([l for l in chain.splitlines() if l.strip()])}


if args[:1] in (["--check"], ["-c"]):
    save()
    if os.environ.get("FAKE_NFT_REFUSE"):
        sys.stderr.write(os.environ["FAKE_NFT_REFUSE"] + "\n")
        sys.exit(1)
    load(args[2])
elif args[:1] == ["-f"]:
    name, table = load(args[1])
    state["tables"][name] = table
    save()
elif args[:3] == ["-j", "list", "table"]:
    save()
    name = args[4]
    if name not in state["tables"]:
        sys.stderr.write("Error: No such file or directory\nlist table inet %s\n" % name)
        sys.exit(1)
    table = state["tables"][name]
    items = [{"metainfo": {"version": "1.0.9", "release_name": "Old Doc Yak #3", "json_schema_version": 1}},
             {"table": {"family": "inet", "name": name, "handle": 7, "comment": table["comment"]}},
             {"chain": {"family": "inet", "table": name, "name": "input", "handle": 1, "type": "filter",
                        "hook": "input", "prio": -5, "policy": "accept"}}]
    items += [{"rule": {"family": "inet", "table": name, "chain": "input", "handle": 2 + i,
                        "expr": [{"accept": None}]}} for i in range(table["rules"])]
    print(json.dumps({"nftables": items}))
elif args[:3] == ["delete", "table", "inet"]:
    save()
    if args[3] not in state["tables"]:
        sys.stderr.write("Error: No such file or directory\n")
        sys.exit(1)
    del state["tables"][args[3]]
    save()
else:
    save()
    sys.stderr.write("fake nft: unexpected %r\n" % args)
    sys.exit(2)
'''


@pytest.fixture
def nft(tmp_path, monkeypatch):
    """A fake nft on PATH; read() is its state: the loaded tables and every argv."""
    script = tmp_path / "fake_nft.py"
    script.write_text(FAKE_NFT)
    bindir = on_path(monkeypatch, tmp_path / "fake-nft-bin", {"nft": python_script(script)})
    state = tmp_path / "fake-nft-state.json"
    monkeypatch.setenv("FAKE_NFT_STATE", str(state))

    class Nft:
        path = str(bindir / "nft")

        def read(self):
            return json.loads(state.read_text()) if state.exists() else {"tables": {}, "calls": []}

        def calls(self, *prefix):
            return [c for c in self.read()["calls"] if c[:len(prefix)] == list(prefix)]

        def forget_calls(self):
            data = self.read()
            data["calls"] = []
            state.write_text(json.dumps(data))

        def drop(self, table="laguna_spark"):
            data = self.read()
            data["tables"].pop(table, None)
            state.write_text(json.dumps(data))

    return Nft()


def _args(tmp_path, **more):
    args = {"path": str(tmp_path / "etc" / "laguna-spark" / "firewall.nft"), "ray_port": 6379,
            "ray_ports": RAY_PORTS, "cluster": CLUSTER}
    args.update(more)
    return args


def test_a_fresh_install_writes_and_loads_and_a_rerun_does_nothing(run_module, nft, tmp_path):
    args = _args(tmp_path)
    first = run_module(firewall_rules, args)
    assert not first.failed, first.get("msg")
    assert first["changed"] and first["file_changed"] and first["loaded"] and first["live"] == "absent"
    path = args["path"]
    assert open(path).read() == first["rules"]
    assert os.stat(path).st_mode & 0o777 == 0o644 and os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o755
    assert nft.read()["tables"]["laguna_spark"] == {"comment": "laguna-spark " + first["digest"], "rules": 4}
    assert len(nft.calls("--check", "-f")) == 1 and nft.calls("-f") == [["-f", path]]
    assert first["nft"] == nft.path
    assert first["ports"] == ["6379", "6380", "6381", "6382", "6383", "6384", "8265", "10001", "10002-19999",
                              "52365"]
    assert first["sources"] == ["10.0.0.11", "10.0.0.12", "192.168.100.1", "192.168.100.2", "192.168.101.1",
                                "192.168.101.2"]
    nft.forget_calls()
    mtime = os.stat(path).st_mtime_ns
    again = run_module(firewall_rules, args)
    assert not again["changed"] and not again["file_changed"] and not again["loaded"] and again["live"] == "current"
    assert again["digest"] == first["digest"] and os.stat(path).st_mtime_ns == mtime
    assert nft.read()["calls"] == [["-j", "list", "table", "inet", "laguna_spark"]]


def test_a_table_gone_from_the_kernel_is_loaded_again_from_the_same_file(run_module, nft, tmp_path):
    args = _args(tmp_path)
    run_module(firewall_rules, args)
    nft.drop()  # `nft flush ruleset` (nftables.service restarted), a reboot without the unit, ...
    nft.forget_calls()
    mtime = os.stat(args["path"]).st_mtime_ns
    result = run_module(firewall_rules, args)
    assert result["changed"] and result["loaded"] and not result["file_changed"] and result["live"] == "absent"
    assert os.stat(args["path"]).st_mtime_ns == mtime
    assert nft.calls("-f") == [["-f", args["path"]]] and nft.calls("--check") == []
    assert "laguna_spark" in nft.read()["tables"]


def test_a_new_setting_rewrites_and_reloads_with_a_diff(run_module, nft, tmp_path):
    args = _args(tmp_path)
    first = run_module(firewall_rules, args)
    changed = run_module(firewall_rules, _args(tmp_path, extra_sources=["10.20.0.0/16"]), diff=True)
    assert changed["changed"] and changed["file_changed"] and changed["loaded"] and changed["live"] == "stale"
    assert changed["diff"]["before"] == first["rules"] and changed["diff"]["after"] == changed["rules"]
    assert "10.20.0.0/16" in open(args["path"]).read()
    assert nft.read()["tables"]["laguna_spark"]["comment"] == "laguna-spark " + changed["digest"]


def test_check_mode_predicts_and_changes_nothing(run_module, nft, tmp_path):
    args = _args(tmp_path)
    result = run_module(firewall_rules, args, check_mode=True, diff=True)
    assert result["changed"] and result["file_changed"] and result["loaded"]
    assert result["diff"]["before"] == "" and result["diff"]["after"] == result["rules"]
    assert not os.path.exists(args["path"]) and not os.path.exists(os.path.dirname(args["path"]))
    assert nft.read()["tables"] == {} and nft.calls("-f") == []
    run_module(firewall_rules, args)
    nft.drop()
    predicted = run_module(firewall_rules, args, check_mode=True)
    assert predicted["changed"] and predicted["loaded"] and not predicted["file_changed"]
    assert nft.read()["tables"] == {}


def test_absent_deletes_the_table_and_the_file(run_module, nft, tmp_path):
    args = _args(tmp_path)
    run_module(firewall_rules, args)
    check = run_module(firewall_rules, {"path": args["path"], "state": "absent"}, check_mode=True, diff=True)
    assert check["changed"] and check["deleted"] and check["file_changed"] and os.path.exists(args["path"])
    assert "laguna_spark" in nft.read()["tables"] and check["diff"]["after"] == ""
    gone = run_module(firewall_rules, {"path": args["path"], "state": "absent"})
    assert gone["changed"] and gone["deleted"] and gone["file_changed"] and not gone["loaded"]
    assert not os.path.exists(args["path"]) and nft.read()["tables"] == {}
    assert nft.calls("delete") == [["delete", "table", "inet", "laguna_spark"]]
    again = run_module(firewall_rules, {"path": args["path"], "state": "absent"})
    assert not again["changed"] and not again["deleted"] and not again["file_changed"]


def test_another_table_name_is_its_own_table(run_module, nft, tmp_path):
    result = run_module(firewall_rules, _args(tmp_path, table="site_ray"))
    assert "table inet site_ray {" in result["rules"] and list(nft.read()["tables"]) == ["site_ray"]
    bad = run_module(firewall_rules, _args(tmp_path, table="bad name"))
    assert bad.failed and "table 'bad name'" in bad["msg"]


def test_rules_nft_refuses_fail_with_its_message_and_leave_the_file(run_module, nft, tmp_path, monkeypatch):
    args = _args(tmp_path)
    monkeypatch.setenv("FAKE_NFT_REFUSE", "Error: Could not process rule: No such file or directory")
    result = run_module(firewall_rules, args)
    assert result.failed and "nft --check refuses the rules" in result["msg"]
    assert "Could not process rule: No such file or directory" in result["msg"]
    assert not os.path.exists(args["path"]) and nft.read()["tables"] == {}


def test_bad_input_fails_naming_it(run_module, nft, tmp_path):
    result = run_module(firewall_rules, _args(tmp_path, guarded_ports=["6379-6300"]))
    assert result.failed and "'6379-6300': the range's first port is above its last" in result["msg"]
    result = run_module(firewall_rules, _args(tmp_path, cluster=[
        {"name": "spark-2", "addresses": ["spark-2.invalid"]}]))
    assert result.failed and "cluster host spark-2: spark-2.invalid does not resolve on this node" in result["msg"]
    assert not os.path.exists(_args(tmp_path)["path"])


def test_a_missing_nft_names_the_package_and_the_fix(run_module, tmp_path):
    result = run_module(firewall_rules, _args(tmp_path, nft=str(tmp_path / "no-nft")))
    assert result.failed
    assert "nft not found" in result["msg"] and "nftables" in result["msg"]
    assert "apt install nftables" in result["msg"] and "firewall_enabled: false" in result["msg"]
    assert "close them" in result["msg"]
    path = tmp_path / "firewall.nft"
    path.write_text("old")
    gone = run_module(firewall_rules, {"path": str(path), "state": "absent", "nft": str(tmp_path / "no-nft")})
    assert gone["changed"] and gone["file_changed"] and not gone["deleted"] and not path.exists()


# --- the real nft ----------------------------------------------------------

NFT = shutil.which("nft") or next((p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None)
needs_nft = pytest.mark.skipif(NFT is None, reason="nft is not installed (apt install nftables; scripts/setup.sh)")


@needs_nft
def test_the_real_nft_accepts_the_rendered_rules(tmp_path):
    """`nft --check` parses and evaluates the script in the kernel and commits nothing."""
    cluster = firewall.cluster_sources(CLUSTER + [{"name": "spark-3", "addresses": ["fd00:1::13"],
                                                   "roce_ip": "10.0.0.1", "roce_prefix": 30}])
    wanted = firewall.render("laguna_spark", firewall.ray_ports(6379, RAY_PORTS), cluster,
                             ["10.20.0.0/16", "2001:db8::/64"], 8000, ["192.0.2.0/24", "fd00:2::/48"])
    path = tmp_path / "firewall.nft"
    path.write_text(wanted["text"])
    done = subprocess.run([NFT, "--check", "-f", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("nft --check needs CAP_NET_ADMIN: %s" % done.stderr.strip())
    assert done.returncode == 0, done.stderr


@pytest.fixture
def netns():
    """A private network namespace (held by a sleep) and an nft wrapper that runs in it."""
    if NFT is None:
        pytest.skip("nft is not installed (apt install nftables; scripts/setup.sh)")
    unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
    if not (unshare and nsenter):
        pytest.skip("unshare/nsenter (util-linux) not found")
    holder = subprocess.Popen([unshare, "-n", "sleep", "300"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if holder.poll() is not None:
                pytest.skip("no private network namespace here (unshare -n: %s)"
                            % holder.stderr.read().decode().strip())
            try:
                if os.readlink("/proc/%d/ns/net" % holder.pid) != os.readlink("/proc/self/ns/net"):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            pytest.skip("unshare -n did not make a network namespace in 10 s")
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_the_module_with_the_real_nft_in_a_private_namespace(run_module, netns, tmp_path):
    """Load, rerun, reload after `nft delete table`, absent: with the real nft's JSON (1.0.6 here)."""
    wrapper = tmp_path / "nft"
    wrapper.write_text('#!/bin/sh\nexec nsenter -t %d -n "%s" "$@"\n' % (netns, NFT))
    wrapper.chmod(0o755)

    def nft(*argv):
        return subprocess.run([str(wrapper)] + list(argv), capture_output=True, text=True, check=False)

    args = _args(tmp_path, nft=str(wrapper), extra_sources=["fd00:1::/64"], api_port=8000,
                 api_sources=["192.0.2.0/24"])
    first = run_module(firewall_rules, args)
    assert not first.failed, first.get("msg")
    assert first["changed"] and first["loaded"] and first["file_changed"]
    listed = nft("list", "table", "inet", "laguna_spark").stdout
    assert "reject with tcp reset" in listed and "10002-19999" in listed and "192.168.101.2" in listed
    again = run_module(firewall_rules, args)
    assert not again["changed"] and again["live"] == "current", nft("-j", "list", "table", "inet", "laguna_spark")
    assert nft("delete", "table", "inet", "laguna_spark").returncode == 0
    back = run_module(firewall_rules, args)
    assert back["changed"] and back["loaded"] and not back["file_changed"] and back["live"] == "absent"
    assert nft("flush", "chain", "inet", "laguna_spark", "input").returncode == 0
    refilled = run_module(firewall_rules, args)
    assert refilled["loaded"] and refilled["live"] == "stale"
    assert not run_module(firewall_rules, args)["changed"]
    gone = run_module(firewall_rules, {"path": args["path"], "nft": str(wrapper), "state": "absent"})
    assert gone["changed"] and gone["deleted"] and not os.path.exists(args["path"])
    assert nft("list", "table", "inet", "laguna_spark").returncode != 0


def test_the_monitoring_ports_are_guarded_only_with_monitoring_on():
    """laguna_monitoring_ports (roles/laguna) join the guarded ports when laguna_monitoring is true."""
    ports = {"prometheus": 9090, "node_exporter": "9100"}
    assert firewall.monitoring_ports(False, ports) == []
    assert firewall.monitoring_ports(True, ports) == ["9100", "9090"]
    assert firewall.monitoring_ports(True, {}) == []
    with pytest.raises(ValueError, match="monitoring_ports.prometheus"):
        firewall.monitoring_ports(True, {"prometheus": 70000})
    text = firewall.render("laguna_spark", firewall.ray_ports(6379, {"node_manager": 6380})
                           + firewall.monitoring_ports(True, ports), ["192.168.100.1"])["text"]
    assert "9090" in text and "9100" in text


# --- the boot unit ---------------------------------------------------------

UNIT = "laguna-spark-firewall.service"
# The role's template of the unit (roles/firewall/templates, until the module
# rendered the unit itself), kept to show that the module writes the same file:
# a node the template set up keeps its file, nothing is reloaded.
UNIT_TEMPLATE = os.path.join(FIXTURES, "firewall", "laguna-spark-firewall.service.j2")


def _render_template(**variables):
    import jinja2  # pylint: disable=import-outside-toplevel

    # As ansible.builtin.template renders (trim_blocks, the trailing newline kept).
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    with open(UNIT_TEMPLATE) as handle:
        return env.from_string(handle.read()).render(ansible_managed="Ansible managed", **variables)


def test_the_unit_text_is_what_the_roles_template_rendered():
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "roles", "firewall", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "roles", "firewall", "vars", "main.yml")) as handle:
        assert yaml.safe_load(handle)["firewall_unit"] == UNIT
    for nft, path, table in (("/usr/sbin/nft", defaults["firewall_path"], defaults["firewall_table"]),
                             ("/opt/bin/nft", "/srv/site/ray.nft", "site_ray")):
        rendered = _render_template(firewall_rules={"nft": nft}, firewall_path=path, firewall_table=table)
        assert firewall.unit_text(nft, path, table) == rendered
    text = firewall.unit_text("/usr/sbin/nft", "/etc/laguna-spark/firewall.nft", "laguna_spark")
    assert "ExecStart=/usr/sbin/nft -f /etc/laguna-spark/firewall.nft\n" in text
    assert "ExecStop=-/usr/sbin/nft delete table inet laguna_spark\n" in text and text.endswith("multi-user.target\n")


def test_is_enabled_reads_systemctl_as_the_systemd_service_module_did():
    assert firewall.is_enabled(0, "enabled\n") and firewall.is_enabled(0, "static\n")
    for rc, out in ((0, "enabled-runtime\n"), (0, "indirect\n"), (0, "alias\n"), (1, "disabled\n"),
                    (1, "masked\n"), (1, "linked\n"), (4, ""), (1, "")):
        assert not firewall.is_enabled(rc, out), (rc, out)


def test_the_unit_file_is_written_when_its_text_differs_and_fixed_when_its_mode_or_owner_does():
    want = "unit\n"
    unchanged = dict(write=False, attributes=False, file_changed=False)
    assert firewall.unit_file_state(want, (0o644, 0, 0), want) == unchanged
    for before, attributes in ((None, None), ("old\n", (0o644, 0, 0)), (None, (0o777, 0, 0))):  # missing, old, link
        assert firewall.unit_file_state(before, attributes, want) == dict(write=True, attributes=False,
                                                                          file_changed=True)
    for attributes in ((0o600, 0, 0), (0o4644, 0, 0), (0o644, 1000, 0), (0o644, 0, 1000)):
        assert firewall.unit_file_state(want, attributes, want) == dict(write=False, attributes=True,
                                                                        file_changed=True), attributes
    assert not firewall.unit_file_state(want, (0o644, 1000, 1000), want, owner=(1000, 1000))["file_changed"]


def test_the_unit_plan_reloads_only_after_a_change_and_enables_only_a_unit_not_enabled():
    same = firewall.unit_file_state("u", (0o644, 0, 0), "u")
    new = firewall.unit_file_state(None, None, "u")
    assert firewall.unit_plan(same, True) == dict(file_changed=False, daemon_reload=False, enable=False)
    assert firewall.unit_plan(same, False) == dict(file_changed=False, daemon_reload=False, enable=True)
    assert firewall.unit_plan(new, False) == dict(file_changed=True, daemon_reload=True, enable=True)
    assert firewall.unit_plan(new, True) == dict(file_changed=True, daemon_reload=True, enable=False)


class FakeRun(object):
    """run_command faked: argv recorded, answers by verb ({verb: (rc, out, err)} or a list of them, in turn)."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        answer = self.answers.get(argv[1], (0, "", ""))
        return answer.pop(0) if isinstance(answer, list) else answer


def test_apply_unit_does_only_what_the_plan_says():
    written = []
    plan = firewall.unit_plan(firewall.unit_file_state("u", (0o644, 0, 0), "u"), True)
    run = FakeRun({})
    assert firewall.apply_unit(run, "systemctl", UNIT, plan, lambda: written.append(1)) == (False, "")
    assert run.calls == [] and written == []
    # Not enabled: enabled, nothing written or reloaded.
    run = FakeRun({})
    plan = firewall.unit_plan(firewall.unit_file_state("u", (0o644, 0, 0), "u"), False)
    assert firewall.apply_unit(run, "systemctl", UNIT, plan, lambda: written.append(1)) == (True, "")
    assert run.calls == [["systemctl", "enable", UNIT]] and written == []
    # A new file: written, reloaded, is-enabled read again (the new file's [Install] decides), then enabled.
    new = firewall.unit_file_state(None, None, "u")
    run = FakeRun({"is-enabled": (1, "disabled\n", "")})
    assert firewall.apply_unit(run, "systemctl", UNIT, firewall.unit_plan(new, False), lambda: written.append(1)) \
        == (True, "")
    assert written == [1] and run.calls == [["systemctl", "daemon-reload"], ["systemctl", "is-enabled", UNIT],
                                            ["systemctl", "enable", UNIT]]
    # A changed file of a unit enabled already: written and reloaded, not enabled again.
    run = FakeRun({"is-enabled": (0, "enabled\n", "")})
    assert firewall.apply_unit(run, "systemctl", UNIT, firewall.unit_plan(new, True), lambda: None) == (False, "")
    assert [c[1] for c in run.calls] == ["daemon-reload", "is-enabled"]


def test_apply_unit_fails_with_systemctls_message():
    new = firewall.unit_plan(firewall.unit_file_state(None, None, "u"), False)
    run = FakeRun({"daemon-reload": (1, "", "Failed to reload daemon: Access denied\n")})
    assert firewall.apply_unit(run, "systemctl", UNIT, new, lambda: None) == (
        False, "failure 1 during daemon-reload: Failed to reload daemon: Access denied")
    assert [c[1] for c in run.calls] == ["daemon-reload"]
    run = FakeRun({"enable": (1, "", "Failed to enable unit: Unit file %s is masked.\n" % UNIT)})
    plan = firewall.unit_plan(firewall.unit_file_state("u", (0o644, 0, 0), "u"), False)
    assert firewall.apply_unit(run, "systemctl", UNIT, plan, lambda: None) == (
        False, "Unable to enable service %s: Failed to enable unit: Unit file %s is masked." % (UNIT, UNIT))


def test_read_enabled_gives_the_state_word_or_the_error():
    run = FakeRun({"is-enabled": [(0, "enabled\n", ""), (1, "disabled\n", ""),
                                  (1, "", "Failed to get unit file state for %s: No such file or directory\n" % UNIT)]})
    assert firewall.read_enabled(run, "/usr/bin/systemctl", UNIT) == (True, "enabled")
    assert firewall.read_enabled(run, "/usr/bin/systemctl", UNIT) == (False, "disabled")
    enabled, state = firewall.read_enabled(run, "/usr/bin/systemctl", UNIT)
    assert not enabled and state.endswith("No such file or directory")
    assert run.calls[0] == ["/usr/bin/systemctl", "is-enabled", UNIT]


FAKE_SYSTEMCTL = r'''
import json, os, sys

state_path = os.environ["FAKE_SYSTEMCTL_STATE"]
state = json.load(open(state_path)) if os.path.exists(state_path) else {"enabled": {}, "calls": []}
args = sys.argv[1:]
state["calls"].append(args)
json.dump(state, open(state_path, "w"))
unit_file = os.path.join(os.environ["FAKE_UNIT_DIR"], args[-1])
if args[0] == "is-enabled":
    if not os.path.exists(unit_file):
        sys.stderr.write("Failed to get unit file state for %s: No such file or directory\n" % args[1])
        sys.exit(1)
    word = state["enabled"].get(args[1], "disabled")
    print(word)
    sys.exit(0 if word == "enabled" else 1)
elif args[0] == "enable":
    if not os.path.exists(unit_file):
        sys.stderr.write("Failed to enable unit: Unit file %s does not exist.\n" % args[1])
        sys.exit(1)
    state["enabled"][args[1]] = "enabled"
    json.dump(state, open(state_path, "w"))
elif args[0] != "daemon-reload":
    sys.stderr.write("fake systemctl: unexpected %r\n" % args)
    sys.exit(2)
'''


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """A fake systemctl on PATH (is-enabled, enable, daemon-reload); the unit files in tmp_path/units."""
    script = tmp_path / "fake_systemctl.py"
    script.write_text(FAKE_SYSTEMCTL)
    on_path(monkeypatch, tmp_path / "fake-systemctl-bin", {"systemctl": python_script(script)})
    state = tmp_path / "fake-systemctl-state.json"
    units = tmp_path / "units"
    units.mkdir()
    monkeypatch.setenv("FAKE_SYSTEMCTL_STATE", str(state))
    monkeypatch.setenv("FAKE_UNIT_DIR", str(units))
    # The unit file's owner: root's here as on a node; another user's own when the tests run as one.
    monkeypatch.setattr(firewall_rules, "UNIT_OWNER", (os.geteuid(), os.getegid()))

    class Systemctl:
        dir = str(units)
        path = str(units / UNIT)

        def read(self):
            return json.loads(state.read_text()) if state.exists() else {"enabled": {}, "calls": []}

        def verbs(self):
            return [c[0] for c in self.read()["calls"]]

        def forget_calls(self):
            data = self.read()
            data["calls"] = []
            state.write_text(json.dumps(data))

        def set(self, word):
            data = self.read()
            data["enabled"][UNIT] = word
            state.write_text(json.dumps(data))

    return Systemctl()


def _unit_args(tmp_path, systemctl, **more):
    return _args(tmp_path, unit={"name": UNIT, "dir": systemctl.dir}, **more)


def test_the_unit_is_installed_reloaded_and_enabled_and_a_rerun_only_reads(run_module, nft, systemctl, tmp_path):
    args = _unit_args(tmp_path, systemctl)
    first = run_module(firewall_rules, args)
    assert not first.failed, first.get("msg")
    assert first["changed"] and first["loaded"] and first["file_changed"]
    assert first["unit"] == {"name": UNIT, "path": systemctl.path, "file_changed": True, "daemon_reload": True,
                             "enabled": True, "state": first["unit"]["state"]}
    assert "No such file or directory" in first["unit"]["state"]
    assert open(systemctl.path).read() == firewall.unit_text(nft.path, args["path"], "laguna_spark")
    st = os.stat(systemctl.path)
    assert st.st_mode & 0o7777 == 0o644 and (st.st_uid, st.st_gid) == firewall_rules.UNIT_OWNER
    assert systemctl.verbs() == ["is-enabled", "daemon-reload", "is-enabled", "enable"]
    assert systemctl.read()["enabled"] == {UNIT: "enabled"}
    systemctl.forget_calls()
    nft.forget_calls()
    mtime = os.stat(systemctl.path).st_mtime_ns
    again = run_module(firewall_rules, args)
    assert not again["changed"] and again["unit"] == {"name": UNIT, "path": systemctl.path, "file_changed": False,
                                                      "daemon_reload": False, "enabled": False, "state": "enabled"}
    assert "diff" not in again and os.stat(systemctl.path).st_mtime_ns == mtime
    # The probe: one read of the table, one of is-enabled, nothing else.
    assert systemctl.verbs() == ["is-enabled"] and nft.read()["calls"] == [["-j", "list", "table", "inet",
                                                                            "laguna_spark"]]


def test_a_disabled_unit_is_enabled_and_nothing_else(run_module, nft, systemctl, tmp_path):
    args = _unit_args(tmp_path, systemctl)
    run_module(firewall_rules, args)
    systemctl.set("disabled")  # systemctl disable
    systemctl.forget_calls()
    check = run_module(firewall_rules, args, check_mode=True)
    assert check["changed"] and check["unit"]["enabled"] and not check["unit"]["file_changed"]
    assert check["unit"]["state"] == "disabled" and systemctl.verbs() == ["is-enabled"]
    systemctl.forget_calls()
    result = run_module(firewall_rules, args)
    assert result["changed"] and result["unit"]["enabled"] and not result["unit"]["daemon_reload"]
    assert not result["file_changed"] and not result["loaded"]
    assert systemctl.verbs() == ["is-enabled", "enable"]


def test_an_edited_unit_file_is_written_back_with_a_diff_and_systemd_reloaded(run_module, nft, systemctl, tmp_path):
    args = _unit_args(tmp_path, systemctl)
    run_module(firewall_rules, args)
    wanted = open(systemctl.path).read()
    with open(systemctl.path, "w") as handle:
        handle.write(wanted.replace("Before=network-pre.target\n", ""))
    systemctl.forget_calls()
    check = run_module(firewall_rules, args, check_mode=True, diff=True)
    assert check["changed"] and check["unit"]["file_changed"] and check["unit"]["daemon_reload"]
    assert not check["unit"]["enabled"] and not check["file_changed"]
    assert check["diff"] == {"before": wanted.replace("Before=network-pre.target\n", ""), "after": wanted,
                             "before_header": systemctl.path, "after_header": systemctl.path}
    assert "Before=network-pre.target\n" not in open(systemctl.path).read()  # check mode wrote nothing
    result = run_module(firewall_rules, args)
    assert result["unit"]["file_changed"] and not result["unit"]["enabled"]
    assert open(systemctl.path).read() == wanted
    assert systemctl.verbs() == ["is-enabled", "is-enabled", "daemon-reload", "is-enabled"]
    # Its mode alone: set again, systemd reloaded as after any change of the file.
    os.chmod(systemctl.path, 0o600)
    systemctl.forget_calls()
    mode = run_module(firewall_rules, args)
    assert mode["changed"] and mode["unit"]["file_changed"] and os.stat(systemctl.path).st_mode & 0o7777 == 0o644
    assert systemctl.verbs() == ["is-enabled", "daemon-reload", "is-enabled"]
    # A symlink in its place: replaced by the file.
    os.unlink(systemctl.path)
    os.symlink(args["path"], systemctl.path)
    assert run_module(firewall_rules, args)["unit"]["file_changed"] and not os.path.islink(systemctl.path)
    assert open(systemctl.path).read() == wanted


def test_check_mode_on_a_fresh_node_reports_the_unit_and_changes_nothing(run_module, nft, systemctl, tmp_path):
    args = _unit_args(tmp_path, systemctl)
    result = run_module(firewall_rules, args, check_mode=True, diff=True)
    assert result["changed"] and result["file_changed"] and result["loaded"]
    # The unit file is not there yet: it would be written, systemd reloaded and the unit enabled.
    assert result["unit"]["file_changed"] and result["unit"]["daemon_reload"] and result["unit"]["enabled"]
    assert [d["after_header"] for d in result["diff"]] == [args["path"], systemctl.path]
    assert result["diff"][1]["before"] == "" and result["diff"][1]["after"] == firewall.unit_text(
        nft.path, args["path"], "laguna_spark")
    assert not os.path.exists(systemctl.path) and not os.path.exists(args["path"])
    assert systemctl.verbs() == ["is-enabled"] and systemctl.read()["enabled"] == {} and nft.calls("-f") == []


def test_the_unit_option_fails_naming_the_cause(run_module, nft, systemctl, tmp_path, monkeypatch):
    bad = run_module(firewall_rules, _args(tmp_path, unit={"name": "../evil.service", "dir": systemctl.dir}))
    assert bad.failed and "unit.name '../evil.service'" in bad["msg"] and not os.path.exists(_args(tmp_path)["path"])
    assert systemctl.verbs() == [] and nft.read()["calls"] == []
    # A masked unit: systemctl's refusal is the failure.
    args = _unit_args(tmp_path, systemctl)
    run_module(firewall_rules, args)
    systemctl.set("masked")
    script = tmp_path / "fake_systemctl.py"
    script.write_text(FAKE_SYSTEMCTL.replace(
        'elif args[0] == "enable":',
        'elif args[0] == "enable" and state["enabled"].get(args[1]) == "masked":\n'
        '    sys.stderr.write("Failed to enable unit: Unit file %s is masked.\\n" % args[1])\n'
        '    sys.exit(1)\n'
        'elif args[0] == "enable":'))
    masked = run_module(firewall_rules, args)
    assert masked.failed and masked["msg"] == (
        "Unable to enable service %s: Failed to enable unit: Unit file %s is masked." % (UNIT, UNIT))
    # No systemctl: the failure says what the unit is for.
    monkeypatch.setenv("PATH", os.path.dirname(nft.path))
    gone = run_module(firewall_rules, args)
    assert gone.failed and "systemctl not found" in gone["msg"] and UNIT in gone["msg"]


def test_without_the_unit_option_no_systemctl_runs(run_module, nft, systemctl, tmp_path):
    result = run_module(firewall_rules, _args(tmp_path))
    assert result["changed"] and "unit" not in result and systemctl.verbs() == []
    assert os.listdir(systemctl.dir) == []
    gone = run_module(firewall_rules, _unit_args(tmp_path, systemctl, state="absent"))
    assert gone["changed"] and "unit" not in gone and systemctl.verbs() == []
