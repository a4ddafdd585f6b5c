"""A local Hugging Face Hub double for the laguna-spark staging tests.

Serves, over plain HTTP, what the real `hf download <repo> --local-dir DIR`
(huggingface_hub 2.x, pointed here with HF_ENDPOINT) asks for:

  GET  /api/models/<repo>[/revision/<rev>]          repo info: id, sha, siblings
  GET  /api/models/<repo>/tree/<rev>[/<path>]       file list: size, git oid, lfs {oid: sha256, size}
  HEAD /<repo>/resolve/<rev>/<file>                 X-Repo-Commit, ETag, X-Linked-Etag/-Size
  GET  /<repo>/resolve/<rev>/<file>                 the bytes, honouring "Range: bytes=N-[M]" (206)

Repos are directories: <root>/<org>/<name>/<files>. Files whose name matches
--lfs (default *.safetensors) are published as LFS files (ETag = sha256, like
the real Hub); the others as regular git files (ETag = git blob sha1).
Unknown repos and revisions answer 404 with the Hub's X-Error-Code.
A repo's commit is a hash of its files' sha256s; a file <org>/<name>.commit
beside the repo's directory, read at each request, moves "main" to another
commit with the same files (a test's way to move the branch; the old commit
is then unknown, as a branch's old head is to `revision/main`).

Only the Python standard library is used, so it runs on any test host:

  hub.py generate --root R --repo poolside/Laguna-S-2.1-FP8 --shards 24 --shard-bytes 1048576
  hub.py serve --root R --port 8999 [--host 127.0.0.1] [--rate BYTES_PER_S] [--log FILE]

--rate (or the number in --rate-file, read as it changes) throttles every
response body, so a test can kill a download mid-shard; --log appends one JSON line per request (method, path, range,
bytes sent) so a test can tell what was transferred, and how often.
"""
import argparse
import fnmatch
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

CHUNK = 1 << 20


def shard_names(shards):
    if shards == 1:
        return ["model.safetensors"]
    return ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]


def pseudo_random(seed, size):
    """Deterministic, incompressible bytes (sha256 in counter mode)."""
    out = bytearray()
    counter = 0
    block = b""
    while len(out) < size:
        block = hashlib.sha256(seed + counter.to_bytes(8, "little")).digest()
        out += block * 64  # 2 KiB per hash keeps generation fast enough
        counter += 1
    return bytes(out[:size])


def generate(root, repo, shards, shard_bytes, extra_files=("tokenizer.json", "generation_config.json")):
    """Write a repo shaped like the real ones: shards, index (if sharded), config, small files."""
    top = os.path.join(root, repo)
    os.makedirs(top, exist_ok=True)
    names = shard_names(shards)
    weight_map = {}
    for index, name in enumerate(names):
        data = pseudo_random(("%s/%s" % (repo, name)).encode(), shard_bytes)
        with open(os.path.join(top, name), "wb") as handle:
            handle.write(data)
        weight_map["model.layers.%d.weight" % index] = name
    if shards > 1:
        with open(os.path.join(top, "model.safetensors.index.json"), "w") as handle:
            json.dump({"metadata": {"total_size": shards * shard_bytes}, "weight_map": weight_map}, handle, indent=2)
    with open(os.path.join(top, "config.json"), "w") as handle:
        json.dump({"_name_or_path": repo, "architectures": ["LagunaForCausalLM"]}, handle, indent=2)
    for name in extra_files:
        with open(os.path.join(top, name), "w") as handle:
            json.dump({"name": name, "repo": repo}, handle)
    return top


class Repo:
    def __init__(self, repo_id, top, lfs_pattern):
        self.id = repo_id
        self.top = top
        self.files = {}
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, top).replace(os.sep, "/")
                size = os.path.getsize(full)
                sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
                with open(full, "rb") as handle:
                    for chunk in iter(lambda: handle.read(CHUNK), b""):
                        sha256.update(chunk)
                        sha1.update(chunk)
                self.files[rel] = {"size": size, "oid": sha1.hexdigest(), "sha256": sha256.hexdigest(),
                                   "lfs": fnmatch.fnmatch(name, lfs_pattern), "full": full}
        listing = json.dumps({k: v["sha256"] for k, v in self.files.items()}, sort_keys=True)
        self.base_sha = hashlib.sha1((repo_id + listing).encode()).hexdigest()
        self.commit_file = top.rstrip(os.sep) + ".commit"

    @property
    def sha(self):
        """The commit main is on: the files' hash, moved by the .commit file when there is one."""
        try:
            with open(self.commit_file) as handle:
                moved = handle.read().strip()
        except OSError:
            moved = ""
        return hashlib.sha1((self.base_sha + moved).encode()).hexdigest() if moved else self.base_sha

    def tree_entry(self, rel):
        meta = self.files[rel]
        entry = {"type": "file", "oid": meta["oid"], "size": meta["size"], "path": rel}
        if meta["lfs"]:
            entry["lfs"] = {"oid": meta["sha256"], "size": meta["size"], "pointerSize": 134}
        return entry


class Hub:
    def __init__(self, root, lfs_pattern="*.safetensors", rate=0, log=None, rate_file=None):
        self.repos = {}
        for org in sorted(os.listdir(root)):
            if not os.path.isdir(os.path.join(root, org)):
                continue
            for name in sorted(os.listdir(os.path.join(root, org))):
                top = os.path.join(root, org, name)
                if os.path.isdir(top):
                    repo_id = "%s/%s" % (org, name)
                    self.repos[repo_id] = Repo(repo_id, top, lfs_pattern)
        self._rate = rate
        self.rate_file = rate_file
        self.log = log
        self.lock = threading.Lock()

    @property
    def rate(self):
        """Bytes/s per response body; --rate-file, when it holds a number, wins (tests change it live)."""
        if self.rate_file:
            try:
                with open(self.rate_file) as handle:
                    return int(handle.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return self._rate

    def record(self, **entry):
        if not self.log:
            return
        entry["t"] = round(time.time(), 3)
        with self.lock, open(self.log, "a") as handle:
            handle.write(json.dumps(entry) + "\n")


def handler_for(hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "laguna-hub-double/1"

        def log_message(self, fmt, *args):  # quiet; the JSON log says what happened
            pass

        def send_json(self, status, body, headers=None):
            data = json.dumps(body).encode()
            # Logged before it is sent: a client that has the answer finds its request in the log.
            hub.record(method=self.command, path=self.path, status=status, sent=len(data))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def error(self, status, code, message):
            self.send_json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

        def find(self, repo_id, revision):
            repo = hub.repos.get(repo_id)
            if repo is None:
                self.error(404, "RepoNotFound", "Repository Not Found for url: %s" % self.path)
                return None
            if revision not in ("main", repo.sha):
                self.error(404, "RevisionNotFound", "Invalid rev id: %s" % revision)
                return None
            return repo

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urlparse(self.path)
            path = unquote(url.path)
            query = parse_qs(url.query)
            match = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
            if match:
                repo = self.find(match.group(1), match.group(2) or "main")
                if repo:
                    self.send_json(200, {
                        "id": repo.id, "modelId": repo.id, "sha": repo.sha, "private": False,
                        "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                        "lastModified": "2026-01-01T00:00:00.000Z",
                        "siblings": [{"rfilename": rel} for rel in repo.files]})
                return
            match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
            if match:
                repo = self.find(match.group(1), match.group(2))
                if repo:
                    prefix = (match.group(3) or "").strip("/")
                    recursive = query.get("recursive", ["false"])[0].lower() == "true"
                    entries, dirs = [], set()
                    for rel in repo.files:
                        if prefix and not rel.startswith(prefix + "/"):
                            continue
                        rest = rel[len(prefix) + 1:] if prefix else rel
                        if "/" in rest and not recursive:
                            dirs.add((prefix + "/" if prefix else "") + rest.split("/")[0])
                            continue
                        entries.append(repo.tree_entry(rel))
                    entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
                    self.send_json(200, entries)
                return
            match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if match:
                repo = self.find(match.group(1), match.group(2))
                if repo:
                    self.send_file(repo, match.group(3))
                return
            hub.record(method=self.command, path=self.path, status=404, sent=0, unknown=True)
            self.error(404, "EntryNotFound", "no such endpoint in the hub double: %s" % path)

        def send_file(self, repo, rel):
            meta = repo.files.get(rel)
            if meta is None:
                self.error(404, "EntryNotFound", "Entry not found: %s" % rel)
                return
            size = meta["size"]
            start, end, status = 0, size - 1, 200
            wanted = self.headers.get("Range")
            if wanted and self.command == "GET":
                match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
                if not match or int(match.group(1)) >= max(size, 1):
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    hub.record(method="GET", path=self.path, status=416, range=wanted, sent=0)
                    return
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1 if size else 0))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("X-Repo-Commit", repo.sha)
            self.send_header("ETag", '"%s"' % meta["oid"])
            if meta["lfs"]:
                self.send_header("X-Linked-Etag", '"%s"' % meta["sha256"])
                self.send_header("X-Linked-Size", str(size))
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            sent = 0
            if self.command == "GET" and size:
                began = time.monotonic()
                try:
                    with open(meta["full"], "rb") as handle:
                        handle.seek(start)
                        remaining = end - start + 1
                        while remaining > 0:
                            rate = hub.rate
                            chunk = handle.read(min(CHUNK if not rate else max(rate // 20, 4096), remaining))
                            if not chunk:
                                break
                            self.wfile.write(chunk)
                            sent += len(chunk)
                            remaining -= len(chunk)
                            if rate:
                                ahead = len(chunk) / rate - (time.monotonic() - began)
                                began = time.monotonic()
                                if ahead > 0:
                                    time.sleep(ahead)
                                    began += ahead
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
            hub.record(method=self.command, path=self.path, status=status, range=wanted, sent=sent, file=rel)

    return Handler


def serve(args):
    hub = Hub(args.root, args.lfs, args.rate, args.log, args.rate_file)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(hub))
    server.daemon_threads = True
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as handle:
            handle.write(str(server.server_address[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    served = ", ".join(sorted(hub.repos))
    sys.stderr.write("hub double on http://%s:%d serving %s\n" % (args.host, server.server_address[1], served))
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv=None):
    top = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = top.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write a repo of generated shards")
    gen.add_argument("--root", required=True)
    gen.add_argument("--repo", required=True)
    gen.add_argument("--shards", type=int, default=24)
    gen.add_argument("--shard-bytes", type=int, default=1 << 20)
    run = sub.add_parser("serve", help="serve the repos under --root")
    run.add_argument("--root", required=True)
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=0)
    run.add_argument("--port-file", help="write the bound port here once listening")
    run.add_argument("--lfs", default="*.safetensors", help="glob of files published as LFS")
    run.add_argument("--rate", type=int, default=0, help="bytes/s per response body (0: unthrottled)")
    run.add_argument("--rate-file", help="file holding the rate (read live; overrides --rate)")
    run.add_argument("--log", help="append one JSON line per request to this file")
    args = top.parse_args(argv)
    if args.command == "generate":
        print(generate(args.root, args.repo, args.shards, args.shard_bytes))
    else:
        serve(args)


if __name__ == "__main__":
    main()
