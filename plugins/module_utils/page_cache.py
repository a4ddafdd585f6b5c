# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""How much of a file tree is in the page cache, and dropping it.

Residency is read with mincore(2) over a read-only shared mapping of each
file (nothing is read from disk); dropping uses
posix_fadvise(POSIX_FADV_DONTNEED), which releases the file's clean cached
pages (what the recipe's purge-cache step does, file by file, without root
and without touching any other file's pages).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = None


def _mincore():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        _libc.mincore.restype = ctypes.c_int
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _libc.mmap.restype = ctypes.c_void_p
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.munmap.restype = ctypes.c_int
    return _libc


def cached_bytes(path, window=1 << 30):
    """Bytes of ``path`` resident in the page cache."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = _mincore()
    resident = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = 0
        while offset < size:
            length = min(window, size - offset)
            addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap failed for %s" % path)
            try:
                pages = (length + PAGE - 1) // PAGE
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(addr, length, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore failed for %s" % path)
                count = sum(1 for b in vec if b & 1)
            finally:
                libc.munmap(addr, length)
            resident += min(count * PAGE, length)
            offset += length
    finally:
        os.close(fd)
    return resident


def drop(path):
    """Ask the kernel to drop ``path``'s cached pages (dirty pages are written first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages cannot be dropped until written
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def tree_files(root):
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                yield full


def survey(paths):
    """{path: {'files', 'bytes', 'cached'}} for each tree (missing trees: zeros)."""
    out = {}
    for root in paths:
        entry = {"files": 0, "bytes": 0, "cached": 0, "exists": os.path.isdir(root)}
        for full in (tree_files(root) if entry["exists"] else ()):
            try:
                entry["bytes"] += os.path.getsize(full)
                entry["cached"] += cached_bytes(full)
                entry["files"] += 1
            except OSError:
                continue
        out[root] = entry
    return out


def drop_trees(paths):
    for root in paths:
        if os.path.isdir(root):
            for full in tree_files(root):
                try:
                    drop(full)
                except OSError:
                    continue
