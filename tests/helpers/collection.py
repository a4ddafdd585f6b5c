"""The installed copy of laguna.spark that the tests import and run.

The tests use the collection as users get it: built with
`ansible-galaxy collection build` and installed from the tarball by
scripts/collection.sh. scripts/test.sh builds it once and exports
LAGUNA_COLLECTIONS_PATH; a bare `pytest` builds a private copy for its session
(about a second), so edits to the checkout are always what is tested.

This module is also a pytest plugin (pytest.ini: ``-p helpers.collection``)
for runs with pytest-xdist workers (``-n N``):

* the controller builds the private copy once, before the workers start, and
  the workers inherit LAGUNA_COLLECTIONS_PATH, so no worker builds its own;
* with ``--dist loadgroup``, each test file runs whole on one worker (its
  module fixtures start once), the files that share state (pytest.ini's
  ``xdist_groups``) run on the same worker, and the groups named there are
  handed out first, in their order (the long ones first).
"""
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from helpers import ROOT


def collections_path():
    """The collections path holding ansible_collections/laguna/spark, also put on sys.path."""
    path = os.environ.get("LAGUNA_COLLECTIONS_PATH")
    if not path:
        path = tempfile.mkdtemp(prefix="laguna-collections-")
        atexit.register(shutil.rmtree, path, True)
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "collection.sh"), path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=dict(os.environ, LAGUNA_VENV=sys.prefix))
        os.environ["LAGUNA_COLLECTIONS_PATH"] = path
    if not os.path.isdir(os.path.join(path, "ansible_collections", "laguna", "spark")):
        raise RuntimeError("no laguna.spark under LAGUNA_COLLECTIONS_PATH=%s: run scripts/collection.sh" % path)
    if path not in sys.path:
        sys.path.insert(0, path)
        importlib.invalidate_caches()
    return path


# --- pytest plugin -----------------------------------------------------------

_GROUPS = pytest.StashKey()


def pytest_addoption(parser):
    parser.addini("xdist_groups", type="linelist", default=[],
                  help="'GROUP: FILE [FILE...]' lines: with --dist loadgroup these files share one "
                       "xdist worker; the groups are scheduled first, in this order")


def xdist_groups(config):
    """[(group, [file paths relative to the rootdir])] from pytest.ini, each file checked to exist."""
    groups, seen = [], set()
    for line in config.getini("xdist_groups"):
        name, sep, files = line.partition(":")
        name, files = name.strip(), files.split()
        if not sep or not name or not files:
            raise pytest.UsageError("pytest.ini xdist_groups: %r is not 'GROUP: FILE [FILE...]'" % line)
        for path in files:
            if not os.path.isfile(os.path.join(str(config.rootpath), path)):
                raise pytest.UsageError("pytest.ini xdist_groups: %s (group %s) does not exist" % (path, name))
            if path in seen:
                raise pytest.UsageError("pytest.ini xdist_groups: %s is in two groups" % path)
            seen.add(path)
        groups.append((name, files))
    return groups


def pytest_configure(config):
    groups = xdist_groups(config)  # a stale entry fails every run, not only the parallel ones
    config.stash[_GROUPS] = groups
    controller = not hasattr(config, "workerinput")
    if controller and getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") != "no":
        collections_path()  # once, before the workers start: they inherit LAGUNA_COLLECTIONS_PATH


def _group_of(config):
    return {path: name for name, files in config.stash[_GROUPS] for path in files}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, called on the controller
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with pytest.ini's groups: xdist's own (the xdist_group mark) does not
    work with pytest 9, where xdist 3.8's rewrite of Item._nodeid no longer changes the nodeid."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

    group_of = _group_of(config)

    class FileGroupScheduling(LoadScopeScheduling):
        """A work unit per group of files; a file in no group is a group of its own."""

        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return group_of.get(path, path)

    # The units in collection order, which pytest_collection_modifyitems sets (not by size).
    config.option.loadscopereorder = False
    return FileGroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker under --dist loadgroup: pytest.ini's groups first, in their order
    (the scheduler hands the units out in this order), then the other files as collected."""
    if not getattr(config.option, "loadgroup", False):
        return
    group_of = _group_of(config)
    rank = {name: index for index, (name, _files) in enumerate(config.stash[_GROUPS])}
    # Stable: files and tests keep their order within a group.
    items.sort(key=lambda item: rank.get(
        group_of.get(item.path.relative_to(config.rootpath).as_posix()), len(rank)))
