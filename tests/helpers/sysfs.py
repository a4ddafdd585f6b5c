"""Fake /sys/class/infiniband trees (the GID table of one RDMA port, a Spark's CX7) and the fabric facts read from them."""
import os

HCA = "rocep1s0f1"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def mapped(ip):
    """The IPv4-mapped GID of ``ip`` as the kernel writes it."""
    a, b, c, d = (int(x) for x in ip.split("."))
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def make_port(root, gids, hca=HCA, port=1, ndev="enp1s0f1np1", slots=8):
    """Write port ``port`` of ``hca`` under ``root``; returns ``root`` (the sysfs_root).

    gids: {index: (gid, type or None)}; other slots up to ``slots`` are zero GIDs.
    """
    base = os.path.join(str(root), hca, "ports", str(port))
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    for index in range(slots):
        gid, kind = gids.get(index, (ZERO, None))
        with open(os.path.join(base, "gids", str(index)), "w") as handle:
            handle.write(gid + "\n")
        if kind is not None:  # unpopulated slots: reading types/N fails (EINVAL) on a real kernel
            with open(os.path.join(base, "gid_attrs", "types", str(index)), "w") as handle:
                handle.write(kind + "\n")
            with open(os.path.join(base, "gid_attrs", "ndevs", str(index)), "w") as handle:
                handle.write(ndev + "\n")
    return str(root)


FE80 = "fe80:0000:0000:0000:4ebb:47ff:fe0a:1b2c"


def gid_table(address, extra=None):
    """A ConnectX GID table: link-local v1/v2, then (extra, then) the address v1/v2."""
    gids = {0: (FE80, "IB/RoCE v1"), 1: (FE80, "RoCE v2")}
    nxt = 2
    for ip in ([extra] if extra else []) + ([address] if address else []):
        gids[nxt] = (mapped(ip), "IB/RoCE v1")
        gids[nxt + 1] = (mapped(ip), "RoCE v2")
        nxt += 2
    return gids


def make_device(root, name, pci, netdev, gids, state="4: ACTIVE", mtu=9000):
    """An RDMA device as the kernel shows it: ib/<name>/device -> a PCI dir
    with net/<netdev>, the port's state and rate, the netdev's MTU."""
    root = str(root)
    ib, net, pcidir = os.path.join(root, "ib"), os.path.join(root, "net"), os.path.join(root, "pci", pci)
    make_port(ib, gids, hca=name, ndev=netdev)
    os.makedirs(os.path.join(pcidir, "net", netdev), exist_ok=True)
    for name_, text in (("current_link_speed", "32.0 GT/s PCIe\n"), ("current_link_width", "4\n")):
        with open(os.path.join(pcidir, name_), "w") as fh:
            fh.write(text)
    os.symlink(pcidir, os.path.join(ib, name, "device"))
    port = os.path.join(ib, name, "ports", "1")
    for name_, text in (("state", state + "\n"), ("rate", "200 Gb/sec (4X HDR)\n"), ("link_layer", "Ethernet\n")):
        with open(os.path.join(port, name_), "w") as fh:
            fh.write(text)
    os.makedirs(os.path.join(net, netdev), exist_ok=True)
    for name_, text in (("mtu", "%d\n" % mtu), ("operstate", "up\n")):
        with open(os.path.join(net, netdev, name_), "w") as fh:
            fh.write(text)
    return ib, net


def spark(root, address="192.168.100.1", twin1_address="192.168.101.1", extra=None, cabled="f1"):
    """A DGX Spark's CX7: both ports' PCIe twins (rocep1s0fN, roceP2p1s0fN);
    the cabled port ACTIVE with `address` on its first twin (after `extra`,
    an older address, if given) and `twin1_address` on the second.
    Returns (sysfs infiniband dir, sysfs net dir)."""
    for fn in ("0", "1"):
        on = fn == cabled[-1]
        state = "4: ACTIVE" if on else "1: DOWN"
        make_device(root, "rocep1s0f%s" % fn, "0000:01:00.%s" % fn, "enp1s0f%snp%s" % (fn, fn),
                    gid_table(address if on else None, extra if on else None), state)
        make_device(root, "roceP2p1s0f%s" % fn, "0002:01:00.%s" % fn, "enP2p1s0f%snp%s" % (fn, fn),
                    gid_table(twin1_address if on else None), state)
    return os.path.join(str(root), "ib"), os.path.join(str(root), "net")


def fabric_twin(name, netdev, mtu=9000):
    """One twin as the fabric role's facts describe it (rdma_netdev_info), link up at Gen5 x4."""
    return {"name": name, "port": 1, "netdev": netdev, "state": "4: ACTIVE", "rate": "200 Gb/sec (4X HDR)",
            "mtu": mtu, "pcie_speed": "32.0 GT/s PCIe", "pcie_width": "4"}


def fabric_node(host, last, gid=3, mtu1=9000):
    """A Spark's fabric facts as network_gate reads them (both twins, 192.168.10{0,1}.<last>)."""
    return {"host": host, "twins": [fabric_twin("rocep1s0f1", "enp1s0f1np1"),
                                    fabric_twin("roceP2p1s0f1", "enP2p1s0f1np1", mtu1)],
            "addresses": ["192.168.100.%d/24" % last, "192.168.101.%d/24" % last], "gid_indexes": [gid, gid]}
