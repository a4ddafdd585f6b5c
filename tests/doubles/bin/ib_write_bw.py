"""Stand-in for perftest's ib_write_bw (the RDMA devices are hardware).

Takes the options the network_gate role passes (perftest's
src/perftest_parameters.c: -d/--ib-dev, -i/--ib-port, -x/--gid-index,
-p/--port, -D/--duration, -s/--size, -q/--qp, -F/--CPU-freq,
--report_gbits; a trailing server address makes it the client) and refuses
any other, as perftest's getopt_long parser does.

The "connection" is a rendezvous in $IB_WRITE_BW_STANDIN_DIR (no socket, no
traffic): the server writes listen-<port> and waits for the client; a client
without a listening server fails as perftest does ("Couldn't connect to
<address>:<port>", exit 1). The client prints the recorded report of its
device's twin (tests/doubles/recorded/perftest, see its README), or the slow
twin's when the file slow-<device> exists in that directory. Every run is
logged to runs.jsonl there (argv, role, start and end times).
"""
import argparse
import json
import os
import sys
import time

RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recorded", "perftest")
REPORTS = {"rocep1s0f1": "ib_write_bw_twin0_ok.txt", "roceP2p1s0f1": "ib_write_bw_twin1_ok.txt"}
SLOW = {"roceP2p1s0f1": "ib_write_bw_twin1_slow.txt"}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write("ib_write_bw: %s\n Invalid Command or flag.\n Please check command line and run again.\n"
                         % message)
        sys.exit(1)


def build_parser():
    parser = Parser(prog="ib_write_bw", add_help=False, allow_abbrev=False)
    parser.add_argument("-d", "--ib-dev", required=True)
    parser.add_argument("-i", "--ib-port", type=int, default=1)
    parser.add_argument("-x", "--gid-index", type=int, required=True)
    parser.add_argument("-p", "--port", type=int, default=18515)
    parser.add_argument("-D", "--duration", type=int, default=5)
    parser.add_argument("-s", "--size", type=int, default=65536)
    parser.add_argument("-q", "--qp", type=int, default=1)
    parser.add_argument("-F", "--CPU-freq", action="store_true")
    parser.add_argument("--report_gbits", action="store_true")
    parser.add_argument("server", nargs="?")
    return parser


def parse(argv):
    return build_parser().parse_args(argv)


def main(argv):
    args = parse(argv)
    rendezvous = os.environ["IB_WRITE_BW_STANDIN_DIR"]
    listen = os.path.join(rendezvous, "listen-%d" % args.port)
    client = os.path.join(rendezvous, "client-%d" % args.port)
    started = time.time()
    if args.server is None:
        with open(listen, "w") as handle:
            handle.write(args.ib_dev)
        deadline = time.monotonic() + 600
        while not os.path.exists(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.unlink(listen)
        if not os.path.exists(client):
            sys.stderr.write(" Unable to accept a connection on port %d\n" % args.port)
            return 1
        os.unlink(client)
        report = REPORTS[args.ib_dev]
    else:
        if not os.path.exists(listen):
            sys.stderr.write(" Couldn't connect to %s:%d\n Unable to open file descriptor for socket connection\n"
                             % (args.server, args.port))
            return 1
        time.sleep(min(args.duration, 1))
        with open(client, "w") as handle:
            handle.write(args.server)
        slow = os.path.exists(os.path.join(rendezvous, "slow-%s" % args.ib_dev))
        report = SLOW[args.ib_dev] if slow else REPORTS[args.ib_dev]
    with open(os.path.join(RECORDED, report)) as handle:
        sys.stdout.write(handle.read())
    with open(os.path.join(rendezvous, "runs.jsonl"), "a") as handle:
        handle.write(json.dumps({"argv": argv, "role": "server" if args.server is None else "client",
                                 "start": started, "end": time.time()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
