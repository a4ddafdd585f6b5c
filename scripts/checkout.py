"""This checkout's root and its plugins/module_utils files, for the scripts
that use the collection's logic without the collection installed.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import checkout
    monitoring = checkout.module_utils("monitoring")
"""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_utils(name):
    """plugins/module_utils/<name>.py of this checkout, loaded on its own as
    ``laguna_<name>`` (so it may import only the standard library and
    ansible-core, not the collection)."""
    path = os.path.join(ROOT, "plugins", "module_utils", name + ".py")
    spec = importlib.util.spec_from_file_location("laguna_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
