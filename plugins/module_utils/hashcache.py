# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""A per-node record of file checksums, so a no-op rerun hashes nothing.

Each entry maps an absolute path to the sha256 (and git blob sha1) it had when
its (size, mtime_ns, ctime_ns, inode, device) were what they are now. Any
change to the file -- rewritten, truncated, replaced by rename, touched --
changes one of those and the file is hashed again. ctime cannot be set from
user space, so a same-size overwrite whose mtime was put back is still caught.

A file the collection rewrote on purpose (a draft's config.json whose ignore
list became regexes) is also recorded, as the digests it had before and the
sha256 it has now, so a verify against the Hub accepts exactly that rewrite
of exactly the published file, and nothing else.

Each checkpoint tree's file list (the relative paths its last verification
was against: the Hub's for the head, the head's verified copy for a worker)
is recorded too, so a read-only status check compares what that list names
and tells the other files apart.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.laguna.spark.plugins.module_utils import files

CHUNK = 8 << 20
VERSION = 1


def stat_key(st):
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def digest_bytes(data):
    """(sha256 hex, git blob sha1 hex) of bytes in memory."""
    sha1 = hashlib.sha1(b"blob %d\0" % len(data))
    sha1.update(data)
    return hashlib.sha256(data).hexdigest(), sha1.hexdigest()


def hash_file(path, chunk=CHUNK, drop_cache=True):
    """(sha256 hex, git blob sha1 hex) of a file, read once. With
    ``drop_cache`` the pages read are released again, so verifying 121 GB
    does not fill the unified memory the model is about to be loaded into."""
    size = os.path.getsize(path)
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            sha256.update(block)
            sha1.update(block)
        if drop_cache and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return sha256.hexdigest(), sha1.hexdigest()


class HashCache:
    """Load with ``HashCache.load(path)``; ``digest(path)`` returns the file's
    digests and why they were (or were not) computed; ``dump()`` is the JSON to
    write back (the caller writes it atomically)."""

    def __init__(self, entries=None, ignore=False, rewrites=None, lists=None):
        self.entries = entries or {}
        self.rewrites = rewrites or {}
        self.lists = lists or {}
        self.ignore = ignore
        self.hashed = []     # [{path, bytes, reason}]
        self.reused = 0
        self.dirty = False

    @classmethod
    def load(cls, path, ignore=False):
        entries, rewrites, lists = {}, {}, {}
        if path and os.path.exists(path):
            data = files.read_json(path, default={})
            if data.get("version") == VERSION and isinstance(data.get("files"), dict):
                entries = data["files"]
                if isinstance(data.get("rewrites"), dict):
                    rewrites = data["rewrites"]
                if isinstance(data.get("lists"), dict):
                    lists = data["lists"]
        return cls(entries, ignore, rewrites, lists)

    def digest(self, path):
        """{'sha256', 'git_oid', 'size'} of ``path``, from the record when its stat is unchanged."""
        path = os.path.abspath(path)
        st = os.stat(path)
        key = stat_key(st)
        known = self.entries.get(path)
        if known and known.get("stat") == key and not self.ignore:
            self.reused += 1
            return {"sha256": known["sha256"], "git_oid": known["git_oid"], "size": st.st_size}
        if self.ignore:
            reason = "full verification requested"
        elif not known:
            reason = "not hashed before"
        else:
            old = known.get("stat") or [None] * 5
            names = ("size", "mtime", "ctime", "inode", "device")
            changed = [names[i] for i in range(5) if i >= len(old) or old[i] != key[i]]
            reason = "changed since last hashed (%s)" % ", ".join(changed)
        sha256, git_oid = hash_file(path)
        after = os.stat(path)
        if stat_key(after) == key:  # not being written while we read it
            self.entries[path] = {"stat": key, "sha256": sha256, "git_oid": git_oid}
            self.dirty = True
        self.hashed.append({"path": path, "bytes": st.st_size, "reason": reason})
        return {"sha256": sha256, "git_oid": git_oid, "size": st.st_size}

    def record(self, path, sha256, git_oid):
        """Record digests just computed for ``path`` as it is now (its writer knows them)."""
        path = os.path.abspath(path)
        self.entries[path] = {"stat": stat_key(os.stat(path)), "sha256": sha256, "git_oid": git_oid}
        self.dirty = True

    def record_rewrite(self, path, before, after_sha256):
        """``path`` was rewritten on purpose from content with digests ``before``
        ((sha256, git_oid)) to content with sha256 ``after_sha256``. A rewrite of
        a rewrite keeps the first original."""
        path = os.path.abspath(path)
        known = self.rewrites.get(path)
        if known and known.get("to_sha256") == before[0]:
            origin = known["from"]
        else:
            origin = {"sha256": before[0], "git_oid": before[1]}
        self.rewrites[path] = {"from": origin, "to_sha256": after_sha256}
        self.dirty = True

    def rewritten_from(self, path, want):
        """The sha256 that ``path`` has when it is the recorded rewrite of the
        file ``want`` ({sha256 or git_oid}) describes; None when there is none."""
        known = self.rewrites.get(os.path.abspath(path))
        if not known:
            return None
        origin = known.get("from") or {}
        if want.get("sha256"):
            same = origin.get("sha256") == want["sha256"]
        else:
            same = bool(want.get("git_oid")) and origin.get("git_oid") == want["git_oid"]
        return known.get("to_sha256") if same else None

    def record_list(self, tree, names):
        """``tree`` (a checkpoint directory) was verified against these relative paths."""
        tree, names = os.path.abspath(tree), sorted(os.path.normpath(str(n)) for n in names)
        if self.lists.get(tree) != names:
            self.lists[tree] = names
            self.dirty = True

    def list_of(self, tree):
        """The relative paths ``tree`` was last verified against (None when never)."""
        names = self.lists.get(os.path.abspath(tree))
        return list(names) if isinstance(names, list) else None

    def forget(self, path):
        if self.entries.pop(os.path.abspath(path), None) is not None:
            self.dirty = True
        if self.rewrites.pop(os.path.abspath(path), None) is not None:
            self.dirty = True

    def prune(self, root):
        """Drop entries under ``root`` whose file is gone."""
        root = os.path.abspath(root) + os.sep
        for path in [p for p in self.entries if p.startswith(root)]:
            if not os.path.exists(path):
                del self.entries[path]
                self.dirty = True
        for path in [p for p in self.rewrites if p.startswith(root)]:
            if not os.path.exists(path):
                del self.rewrites[path]
                self.dirty = True

    def dump(self):
        data = {"version": VERSION, "files": self.entries}
        if self.rewrites:
            data["rewrites"] = self.rewrites
        if self.lists:
            data["lists"] = self.lists
        return json.dumps(data, sort_keys=True)

    def save(self, path, module):
        """Write the record to ``path`` atomically through ``module``'s
        atomic_move, creating its directory."""
        files.write_atomic(module, path, self.dump(), dir_mode=0o777, prefix=".sha256-")
