"""The installed copy of laguna.spark that the tests import and run.

The tests use the collection as users get it: built with
`ansible-galaxy collection build` and installed from the tarball by
scripts/collection.sh. scripts/test.sh builds it once and exports
LAGUNA_COLLECTIONS_PATH; a bare `pytest` builds a private copy for its session
(about a second), so edits to the checkout are always what is tested.
"""
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

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
