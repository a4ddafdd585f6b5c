# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The small files the modules read and write, one way to do each.

* ``read_bytes``, ``read_text``, ``read_sysfs``, ``read_json``: a file's content, or
  ``default`` when it cannot be read (missing, unreadable, a directory).
* ``write_atomic``: a temporary file in the target's directory, then
  ``AnsibleModule.atomic_move``, so a reader sees the old content or the new,
  never a half-written file, and a failed write leaves the old content.
* ``make_dir``: a directory created with a mode when it is missing.
* ``file_mode``: a file's permission bits, or None when it is missing.
* ``nearest``: a path or the nearest of its parents that passes a test
  (exists, is a directory, is a mount point).
* ``list_dir``: a directory's names, sorted, or [] when it cannot be listed.
"""

from __future__ import annotations

import json
import os
import tempfile

RAISE = "raise"
DEFAULT = "default"


def read_bytes(path, default=None):
    """The bytes of ``path``, or ``default`` when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return default


def read_text(path, default=None, encoding=None, errors=None, newline=None, strip=False, undecodable=RAISE):
    """The text of ``path`` (``open(path, "r", encoding=..., errors=..., newline=...)``;
    the defaults are open()'s), stripped with ``strip``, or ``default`` when it
    cannot be read. Content that does not decode raises UnicodeDecodeError, or
    gives ``default`` with ``undecodable="default"``."""
    try:
        with open(path, "r", encoding=encoding, errors=errors, newline=newline) as handle:
            text = handle.read()
    except OSError:
        return default
    except UnicodeDecodeError:
        if undecodable == DEFAULT:
            return default
        raise
    return text.strip() if strip else text


def read_sysfs(path):
    """A sysfs (or /proc) attribute: ASCII, stripped, anything else replaced;
    None when it cannot be read (an unpopulated GID's type fails with EINVAL)."""
    return read_text(path, encoding="ascii", errors="replace", strip=True)


def read_json(path, default=None):
    """The JSON value in ``path``, or ``default`` when it cannot be read or is not JSON."""
    try:
        with open(path, "r") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def file_mode(path, mask=0o7777):
    """``path``'s mode bits under ``mask`` (links followed), or None when it is missing."""
    try:
        return os.stat(path).st_mode & mask
    except OSError:
        return None


def nearest(path, test):
    """``path`` or, when ``test(path)`` fails, the nearest of its parents for
    which it holds; the root (``/`` of an absolute path) when none does."""
    while not test(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def list_dir(path):
    """The names in directory ``path``, sorted; [] when it cannot be listed (missing, not a directory)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def make_dir(path, mode=0o777, exact=False):
    """Create ``path`` and its missing parents with ``mode`` (less the umask)
    when it is not a directory; with ``exact``, a created ``path`` gets ``mode``
    as it is. An existing directory is left as it is. True when it was created."""
    if os.path.isdir(path):
        return False
    os.makedirs(path, mode)
    if exact:
        os.chmod(path, mode)
    return True


def write_atomic(module, path, content, mode=None, dir_mode=None, prefix=".laguna-", suffix="", check=None):
    """Write ``content`` (bytes, or text written in text mode) to ``path``
    through a temporary file in its directory and ``module.atomic_move``.

    ``mode``: None keeps atomic_move's rule (an existing file keeps its mode
    and owner, a new one gets the umask's mode); a number sets that mode
    exactly. ``dir_mode``: create the missing directory with it (``make_dir``);
    None expects the directory to exist. ``check(tmp)`` runs on the written
    temporary file before the move (a failure raises or exits; the target is
    left as it was). Any failure removes the temporary file."""
    directory = os.path.dirname(path) or "."
    if dir_mode is not None:
        make_dir(directory, dir_mode)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as handle:
            handle.write(content)
        if check is not None:
            check(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
    except BaseException:  # also fail_json's SystemExit from check
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    if mode is not None:
        os.chmod(path, mode)  # atomic_move keeps an old file's mode, or gives a new one the umask's
