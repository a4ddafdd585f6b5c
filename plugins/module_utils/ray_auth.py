# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The Ray cluster's authentication token (Ray 2.60's RAY_AUTH_MODE=token).

One token per cluster: made once on the head (256 random bits as 64 hex
digits, as Ray's own `ray get-auth-token --generate` makes them), kept across
runs, made anew when the wanted generation differs from the one recorded
beside it, and installed on every node with mode 0600 in a 0700 directory.
Ray's processes find it through RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (or
~/.ray/auth_token); nothing here ever returns or prints it, except read()
for the one task (no_log) that hands it to the other nodes.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets

from ansible_collections.laguna.spark.plugins.module_utils import files

TOKEN = re.compile(r"^[0-9a-f]{64}$")
# What Ray accepts from a file: the text, stripped; refuse what would not
# survive that unchanged.
GIVEN = re.compile(r"^[!-~]{16,4096}$")


def generate():
    """A new token: 32 random bytes in hex (Ray's generate_new_authentication_token)."""
    return secrets.token_hex(32)


def digest(token):
    """A short sha256 of a token, to compare and report without showing it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16] if token else ""


def generation_path(path):
    return path + ".laguna-generation"


def read(path):
    """The token in ``path`` (stripped), or None."""
    text = files.read_text(path)
    text = text.strip() if text is not None else None
    return text or None


def read_generation(path):
    text = files.read_text(generation_path(path))
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def plan(path, token=None, generation=None):
    """What to do: a dict with ``token`` (the one to write, or None to keep
    the file's), ``reason`` (why it changes, or None), ``generation``."""
    have = read(path)
    recorded = read_generation(path)
    if token is not None:
        if not GIVEN.match(token):
            raise ValueError("the given Ray token is not 16 to 4096 printable characters without spaces")
        if have != token:
            return {"token": token, "reason": "differs from the head's" if have else "missing",
                    "generation": generation}
        return {"token": None, "reason": None, "generation": generation}
    if have is None:
        return {"token": generate(), "reason": "missing", "generation": generation}
    if generation is not None and recorded != generation:
        return {"token": generate(), "reason": "rotated (generation %s -> %s)" % (recorded, generation),
                "generation": generation}
    return {"token": None, "reason": None, "generation": recorded if generation is None else generation}


def write(module, path, token, generation=None):
    """Write the token (0600, its directory 0700) and the generation beside it, atomically."""
    directory = os.path.dirname(path)
    files.make_dir(directory, 0o700)
    os.chmod(directory, 0o700)
    for target, text in ((path, token), (generation_path(path), None if generation is None else "%d\n" % generation)):
        if text is not None:
            files.write_atomic(module, target, text, mode=0o600)
