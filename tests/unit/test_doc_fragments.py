"""The modules' documentation as ansible-doc merges it with plugins/doc_fragments.

What several modules state in the same words (an attribute such as
``diff_mode`` "Reports no diff.", an option such as a vLLM server's ``url``)
lives once, in a doc fragment, and each module names it in
``extends_documentation_fragment``; a module keeps only what it says in its own
words.
"""
import ast
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT
from helpers.collection import collections_path

MODULES = sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
FRAGMENTS = sorted(glob.glob(os.path.join(ROOT, "plugins", "doc_fragments", "*.py")))
SECTIONS = ("options", "attributes")


def name_of(path):
    return os.path.basename(path)[:-3]


def string_constants(path, names=None, cls=None):
    """{NAME: str} of the upper-case string assignments at the top of a file (or of class cls)."""
    body = ast.parse(open(path).read()).body
    if cls:
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls)
    found = {}
    for node in body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            target = node.targets[0].id
            if target.isupper() and (names is None or target in names):
                found[target] = node.value.value
    return found


def own_doc(path):
    """A module's DOCUMENTATION as written in it, before any fragment is merged."""
    return yaml.safe_load(string_constants(path, ("DOCUMENTATION",))["DOCUMENTATION"])


def fragments():
    """{'laguna.spark.NAME[.variant]': parsed YAML} of every fragment variant with content."""
    found = {}
    for path in FRAGMENTS:
        for var, text in string_constants(path, cls="ModuleDocFragment").items():
            ref = "laguna.spark." + name_of(path) + ("" if var == "DOCUMENTATION" else "." + var.lower())
            doc = yaml.safe_load(text) or {}
            if any(doc.get(section) for section in SECTIONS):
                found[ref] = doc
    return found


def normalized(value):
    """The same text however YAML folds it: whitespace runs as one space, a
    one-item description list as its item."""
    if isinstance(value, dict):
        return {key: normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [normalized(item) for item in value]
        return items[0] if len(items) == 1 and isinstance(items[0], str) else items
    if isinstance(value, str):
        return " ".join(value.split())
    return value


def entries(doc):
    """(section, name, normalized definition) of a documentation's options and attributes."""
    for section in SECTIONS:
        for key, value in (doc.get(section) or {}).items():
            yield section, key, json.dumps(normalized(value), sort_keys=True)


@pytest.fixture(scope="module")
def merged():
    """ansible-doc --json of every module of the installed collection: {name: doc}."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    names = ["laguna.spark." + name_of(path) for path in MODULES]
    out = subprocess.run([ansible_doc, "-t", "module", "--json"] + names, env=env, cwd="/",
                         check=True, capture_output=True, text=True).stdout
    docs = json.loads(out)
    assert sorted(docs) == sorted(names)
    return {name[len("laguna.spark."):]: value["doc"] for name, value in docs.items()}


def test_the_modules_and_fragments_are_found():
    assert len(MODULES) >= 29
    assert {"laguna.spark.attributes.no_diff", "laguna.spark.attributes.dgx_spark"} <= set(fragments())


@pytest.mark.parametrize("path", MODULES, ids=name_of)
def test_merged_documentation_states_each_attribute(merged, path):
    attributes = merged[name_of(path)].get("attributes") or {}
    for name in ("check_mode", "diff_mode", "platform"):
        assert name in attributes, "%s: no %s attribute" % (name_of(path), name)
        assert attributes[name].get("support") in ("full", "partial", "none"), (name_of(path), name)
        assert attributes[name].get("description"), (name_of(path), name)
    assert attributes["platform"].get("platforms"), name_of(path)


@pytest.mark.parametrize("path", MODULES, ids=name_of)
def test_merged_documentation_has_what_the_fragments_add(merged, path):
    doc = merged[name_of(path)]
    refs = own_doc(path).get("extends_documentation_fragment") or []
    frags = fragments()
    for ref in refs:
        assert ref in frags, "%s names %s, which no fragment defines" % (name_of(path), ref)
        for section in SECTIONS:
            for key, value in (frags[ref].get(section) or {}).items():
                assert normalized(doc[section][key]) == normalized(value), (name_of(path), ref, key)


def test_no_module_repeats_a_fragment():
    """A module names a fragment instead of writing out what it holds."""
    shared = {}
    for ref, doc in fragments().items():
        for entry in entries(doc):
            shared.setdefault(entry, ref)
    repeated = ["%s: %s %s is %s" % (name_of(path), section, key, shared[(section, key, value)])
                for path in MODULES for section, key, value in entries(own_doc(path))
                if (section, key, value) in shared]
    assert not repeated, "use extends_documentation_fragment instead: %s" % "; ".join(repeated)


def test_no_attribute_or_option_is_written_out_in_two_modules():
    """What two modules say in the same words belongs in a doc fragment."""
    seen = {}
    for path in MODULES:
        for entry in entries(own_doc(path)):
            seen.setdefault(entry, []).append(name_of(path))
    twice = ["%s %s in %s" % (section, key, ", ".join(names))
             for (section, key, _value), names in sorted(seen.items()) if len(names) > 1]
    assert not twice, "move to plugins/doc_fragments/: %s" % "; ".join(twice)


def test_every_fragment_is_used():
    used = {ref for path in MODULES for ref in own_doc(path).get("extends_documentation_fragment") or []}
    assert sorted(set(fragments()) - used) == []
