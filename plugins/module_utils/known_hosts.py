# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""An OpenSSH known_hosts file: read it, plan the pins of the wanted keys, write it.

A known_hosts line is ``[marker] hostpatterns keytype base64 [comment]``.
Host patterns are plain names (``10.89.77.12``, ``[host]:2222``) or hashed
(``|1|base64 salt|base64 HMAC-SHA1(salt, name)``, what ``HashKnownHosts yes``
writes); a name is matched as OpenSSH matches it (lower case; a hashed
pattern by its HMAC). Lines with a marker (``@cert-authority``,
``@revoked``), wildcard or negated patterns, comments, blank lines and
anything unparsable are kept as they are and never match.

plan() decides, for each wanted (name, key): ``add`` when no key of that type
is pinned for the name, ``keep`` when that very key is, ``change`` when
another key of the same type is pinned (the host's key changed since it was
recorded). A change is refused (``Plan.refused``) unless accept_changed is
true; then the old key of that name and type gives way to the new one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import pwd
import struct

from ansible_collections.laguna.spark.plugins.module_utils import files

MARKERS = ("@cert-authority", "@revoked")
WILDCARDS = set("*?!")


class BadKey(ValueError):
    """A wanted key that is not ``keytype base64`` with a matching blob."""


def key_blob(key_b64):
    """The key's bytes, or None when the text is not base64."""
    try:
        return base64.b64decode(key_b64.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def fingerprint(key_b64):
    """The key's SHA256 fingerprint as ``ssh-keygen -lf`` prints it (``SHA256:`` and unpadded base64)."""
    blob = key_blob(key_b64)
    if blob is None:
        return "SHA256:?"
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def blob_type(blob):
    """The key type written at the start of a key blob (an SSH string), or None."""
    if blob is None or len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length == 0 or len(blob) < 4 + length:
        return None
    try:
        return blob[4:4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


def parse_key(text):
    """``(keytype, base64)`` of a public key ``keytype base64 [comment]``; BadKey when it is not one."""
    fields = (text or "").split()
    if len(fields) < 2:
        raise BadKey("%r is not a public key (keytype base64)" % (text,))
    keytype, b64 = fields[0], fields[1]
    found = blob_type(key_blob(b64))
    if found != keytype:
        said = "says %s" % found if found else "is not an SSH key in base64"
        raise BadKey("%r is not a %s public key (its data %s)" % (" ".join(fields[:2])[:60] + "...", keytype, said))
    return keytype, b64


def hash_name(name, salt):
    """OpenSSH's hashed host pattern of ``name`` with ``salt`` (bytes)."""
    digest = hmac.new(salt, name.lower().encode("utf-8"), hashlib.sha1).digest()
    return "|1|%s|%s" % (base64.b64encode(salt).decode("ascii"), base64.b64encode(digest).decode("ascii"))


def pattern_matches(pattern, name):
    """Whether one host pattern names exactly ``name`` (plain or hashed); wildcards never do."""
    if pattern.startswith("|1|"):
        parts = pattern.split("|")
        if len(parts) != 4:
            return False
        salt, want = key_blob(parts[2]), key_blob(parts[3])
        if salt is None or want is None:
            return False
        got = hmac.new(salt, name.lower().encode("utf-8"), hashlib.sha1).digest()
        return hmac.compare_digest(got, want)
    if WILDCARDS & set(pattern):
        return False
    return pattern.lower() == name.lower()


class Line(object):
    """One line of the file. ``patterns``/``keytype``/``key`` only for a plain host entry."""

    def __init__(self, text):
        self.text = text  # without its newline
        self.patterns = None
        self.keytype = None
        self.key = None
        self.rest = ""
        self.edited = False  # patterns or key changed: render() it
        self.dropped = False  # no pattern left: not written
        stripped = text.strip()
        if not stripped or stripped.startswith("#") or stripped.split()[0] in MARKERS:
            return
        fields = stripped.split(None, 3)
        if len(fields) < 3 or fields[0].startswith("@"):
            return
        self.patterns = fields[0].split(",")
        self.keytype, self.key = fields[1], fields[2]
        self.rest = fields[3] if len(fields) > 3 else ""

    @property
    def entry(self):
        return self.patterns is not None

    @property
    def kind(self):
        if self.entry:
            return "hashed" if any(p.startswith("|1|") for p in self.patterns) else "plain"
        stripped = self.text.strip()
        if not stripped:
            return "blank"
        if stripped.startswith("#"):
            return "comment"
        if stripped.split()[0] in MARKERS:
            return "marker"
        return "other"

    def matches(self, name):
        return self.entry and any(pattern_matches(p, name) for p in self.patterns)

    def render(self):
        fields = [",".join(self.patterns), self.keytype, self.key] + ([self.rest] if self.rest else [])
        return " ".join(fields)


def parse(text):
    """The file's lines (Line), in order; a final newline is not a line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [Line(line) for line in lines]


def read(path):
    """The file's text ("" when it does not exist)."""
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            return ""
        raise exc


class Change(object):
    """A pinned key of one name and type that differs from the wanted one."""

    def __init__(self, host, name, keytype, old_keys, key):
        self.host = host
        self.name = name
        self.keytype = keytype
        self.old_keys = old_keys
        self.key = key

    def as_dict(self):
        return {"host": self.host, "name": self.name, "type": self.keytype,
                "old_fingerprint": ", ".join(fingerprint(k) for k in self.old_keys),
                "new_fingerprint": fingerprint(self.key)}


class Plan(object):
    """What to do to the file: ``added`` and ``changed`` (Change) and the text after."""

    def __init__(self, before, after, added, kept, changed, refused):
        self.before = before
        self.after = after
        self.added = added
        self.kept = kept
        self.changed = changed
        self.refused = refused

    @property
    def writes(self):
        return self.after != self.before


def wanted_pairs(pairs):
    """[(host, name, keytype, b64)] of ``pairs`` ({name, key[, host]}), without repeats, in order."""
    seen, wanted = set(), []
    for pair in pairs:
        name = str(pair.get("name") or "").strip()
        if not name or any(c.isspace() or c == "," for c in name) or WILDCARDS & set(name):
            raise BadKey("%r is not a host name or address to pin" % (pair.get("name"),))
        keytype, b64 = parse_key(pair.get("key"))
        if (name.lower(), keytype, b64) in seen:
            continue
        seen.add((name.lower(), keytype, b64))
        wanted.append((pair.get("host") or name, name, keytype, b64))
    return wanted


def plan(text, pairs, accept_changed=False):
    """Plan the pins of ``pairs`` in a file holding ``text``."""
    lines = parse(text)
    added, kept, changed = [], [], []
    for host, name, keytype, b64 in wanted_pairs(pairs):
        pinned = [line for line in lines if line.keytype == keytype and line.matches(name)]
        if any(line.key == b64 for line in pinned):
            kept.append({"host": host, "name": name, "type": keytype})
        elif pinned:
            old = []
            for line in pinned:
                if line.key not in old:
                    old.append(line.key)
            changed.append(Change(host, name, keytype, old, b64))
        else:
            added.append({"host": host, "name": name, "type": keytype, "key": b64,
                          "fingerprint": fingerprint(b64)})
    refused = [] if accept_changed else list(changed)
    if refused:
        return Plan(text, text, added, kept, changed, refused)
    if not added and not changed:
        return Plan(text, text, added, kept, changed, refused)
    out = [line.render() if line.edited else line.text for line in replace(lines, changed) if not line.dropped]
    out += ["%s %s %s" % (item["name"], item["type"], item["key"]) for item in added]
    return Plan(text, "\n".join(out) + "\n", added, kept, changed, refused)


def replace(lines, changed):
    """The lines with each changed name's old key of that type replaced by the new one.

    A line whose every pattern is a changed name of its type, all getting the
    same new key, gets the new key in place (hashed patterns stay hashed);
    otherwise the changed names leave the line (the line goes when none is
    left) and a plain line ``name keytype key`` follows where it was.
    """
    new_key = {}
    for change in changed:
        new_key[(change.name.lower(), change.keytype)] = change.key
    result = []
    for line in lines:
        result.append(line)
        if not line.entry:
            continue
        hits = {}  # pattern index -> (name, new key)
        for (name, keytype), key in new_key.items():
            if line.keytype != keytype:
                continue
            for index, pattern in enumerate(line.patterns):
                if pattern_matches(pattern, name):
                    hits[index] = (name, key)
        if not hits:
            continue
        keys = set(key for _name, key in hits.values())
        if len(hits) == len(line.patterns) and len(keys) == 1:
            line.key = keys.pop()
            line.edited = True
            continue
        line.patterns = [p for index, p in enumerate(line.patterns) if index not in hits]
        line.edited = True
        if not line.patterns:
            line.dropped = True
        for index in sorted(hits):
            name, key = hits[index]
            result.append(Line("%s %s %s" % (name, line.keytype, key)))
    return result


def refusal(plan_, path, user=None):
    """The message for a plan's refused keys: each key of each host with both
    fingerprints, then the two fixes for that name."""
    by_name = []
    for change in plan_.refused:
        if not by_name or by_name[-1][0] != (change.host, change.name):
            by_name.append(((change.host, change.name), []))
        by_name[-1][1].append(change)
    as_user = "as %s, " % user if user else ""
    parts = ["Refused: a pinned SSH host key changed; %s was left as it was." % path]
    for (host, name), changes in by_name:
        keys = "; ".join("%s key %s is pinned, the host now has %s"
                         % (c.keytype, ", ".join(fingerprint(k) for k in c.old_keys), fingerprint(c.key))
                         for c in changes)
        who = "%s (%s)" % (host, name) if host != name else name
        parts.append(
            "%s: the host key changed since it was recorded: %s. If its keys were regenerated on purpose "
            "(otherwise find out who answers at %s first), either remove the old key (%sssh-keygen -R %s -f %s) "
            "and rerun, or rerun with -e ssh_mesh_accept_changed_host_keys=true to accept the changed keys "
            "for that run." % (who, keys, name, as_user, name, path))
    return " ".join(parts)


def owner_name(path):
    """The user who owns the file (or, for a new one, its directory), for the fix's wording."""
    for candidate in (path, os.path.dirname(path)):
        try:
            return pwd.getpwuid(os.stat(candidate).st_uid).pw_name
        except (OSError, KeyError):
            continue
    return None


def owner_of(path):
    """(uid, gid) of ``path``, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_uid, st.st_gid


def write(module, path, text, mode=0o600):
    """Write ``text`` to ``path`` through files.write_atomic: an existing file
    keeps its mode and owner, a new one gets ``mode`` and (when root writes it)
    its directory's owner."""
    directory = os.path.dirname(path) or "."
    files.make_dir(directory, 0o700)
    existed = os.path.exists(path)
    keep_mode = files.file_mode(path) if existed else mode
    owner = owner_of(path) if existed else owner_of(directory)
    files.write_atomic(module, path, text, mode=keep_mode, prefix=".laguna-known_hosts-")
    if owner is not None and os.geteuid() == 0 and owner_of(path) != owner:
        os.chown(path, owner[0], owner[1])


def peer_pairs(host, names, keys):
    """[{host, name, key}] of one peer: each of its names (as text, repeats dropped) with each of
    its public keys (``keytype base64``, any comment dropped)."""
    unique = []
    for name in names:
        name = str(name).strip()
        if name and name not in unique:
            unique.append(name)
    keys = [" ".join(str(key).split()[:2]) for key in keys or [] if str(key).strip()]
    return [{"host": str(host), "name": name, "key": key} for name in unique for key in keys]
