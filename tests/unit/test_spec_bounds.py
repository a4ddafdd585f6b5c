"""One place per fact about a variable: type, default and description in the role's
meta/argument_specs.yml, range or format in config_check.BOUNDS, and the bound's sentence
in the description written from BOUNDS by scripts/spec_bounds.py. These tests fail when
the two disagree or one of them lacks a variable."""
import glob
import importlib.util
import os

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import config_check as cc

from helpers import ROOT

SPEC_FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))
DOCUMENTS = dict((path, yaml.safe_load(open(path))) for path in SPEC_FILES)
SPECS, CONFLICTS = cc.merge_specs(list(DOCUMENTS.values()))


def load_script():
    spec = importlib.util.spec_from_file_location("spec_bounds", os.path.join(ROOT, "scripts", "spec_bounds.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = load_script()
FIX = "run `python3 scripts/spec_bounds.py` after changing config_check.BOUNDS"


def options():
    """(file, entry point, name, spec) of every variable a role declares."""
    for path, document in DOCUMENTS.items():
        for entry, value in document["argument_specs"].items():
            for name, spec in (value.get("options") or {}).items():
                yield os.path.relpath(path, ROOT), entry, name, spec


def test_every_bounded_variable_is_declared_with_a_fitting_type():
    assert CONFLICTS == []
    wrong = []
    for name, bound in sorted(cc.BOUNDS.items()):
        if name not in SPECS:
            wrong.append("%s has a bound but no argument spec" % name)
            continue
        kind = SPECS[name].get("type", "str")
        fits = {"min/max": bound.min is None and bound.max is None or kind in ("int", "float"),
                "fmt": not bound.fmt or kind in ("str", "path"),
                "elements/min_items": not (bound.elements or bound.min_items) or kind == "list",
                "keys/each": (bound.keys is None and bound.each is None) or kind == "dict"}
        wrong += ["%s is declared %s, but its bound has %s" % (name, kind, what) for what, ok in fits.items() if not ok]
    assert wrong == []


def test_every_declared_variable_but_a_bool_has_a_bound_or_is_declared_free_form():
    missing = sorted(name for name, spec in SPECS.items() if spec.get("type", "str") != "bool" and name not in cc.BOUNDS)
    assert missing == [], "add these to config_check.BOUNDS (ANY if any value of the type will do)"


def test_each_description_states_exactly_its_bound():
    wrong = []
    for path, entry, name, spec in options():
        items = spec.get("description")
        items = items if isinstance(items, list) else [items]
        stated = [item for item in items if str(item).startswith(cc.DOC_PREFIX)]
        sentence = cc.doc_sentence(name)
        expected = [sentence] if sentence else []
        if stated != expected or (sentence and items[-1] != sentence):
            wrong.append("%s %s %s: %s, expected %s" % (path, entry, name, stated, expected))
    assert wrong == [], FIX


def test_the_script_would_change_no_argument_spec():
    stale = []
    for path in SPEC_FILES:
        with open(path) as handle:
            text = handle.read()
        if SCRIPT.render(text, cc.doc_sentence, cc.DOC_PREFIX) != text:
            stale.append(os.path.relpath(path, ROOT))
    assert stale == [], FIX


@pytest.mark.parametrize("name, sentence", [
    ("vllm_serve_num_speculative_tokens", "Checked by M(laguna.spark.config_check): between 1 and 32."),
    ("vllm_serve_kv_cache_memory_bytes", "Checked by M(laguna.spark.config_check): >= 1."),
    ("laguna_ray_ports", "Checked by M(laguna.spark.config_check): each value between 1 and 65535."),
    ("laguna_venv", "Checked by M(laguna.spark.config_check): an absolute path (no ~: it would expand to the "
                    "connecting user's home); never null."),
    ("staging_artifacts", "Checked by M(laguna.spark.config_check): at least 1 item(s)."),
    ("vllm_serve_environment", "Checked by M(laguna.spark.config_check): each key an environment variable name."),
    ("laguna_kill_mode", None),  # ANY: the choices are in the spec
    ("laguna_fast_noop", None),  # a bool
])
def test_the_sentence_is_what_the_bound_says(name, sentence):
    assert cc.doc_sentence(name) == sentence


SAMPLE = """---
argument_specs:
  main:
    short_description: A sample
    description:
      - Not an option.
    options: &sample
      sample_count:
        description: How many, stated on one line
          and a second.
        type: int
      sample_stale:
        description:
          - What it is.
          - "Checked by M(laguna.spark.config_check): between 1 and
            2."
          - More.
        type: int
      sample_free:
        description:
          - Anything goes.
          - "Checked by M(laguna.spark.config_check): between 1 and 2."
        type: str
      sample_nested:
        description: A list of dicts.
        type: list
        elements: dict
        options:
          inner:
            description: Not a variable; never given a sentence.
            type: int
  other:
    options: *sample
"""

WANTED = {"sample_count": "Checked by M(laguna.spark.config_check): between 1 and 9.",
          "sample_stale": "Checked by M(laguna.spark.config_check): " + "a long format " * 12 + "end.",
          "sample_nested": "Checked by M(laguna.spark.config_check): at least 1 item(s)."}


def test_the_script_writes_replaces_and_removes_sentences():
    text = SCRIPT.render(SAMPLE, WANTED.get, cc.DOC_PREFIX)
    entry = yaml.safe_load(text)["argument_specs"]["main"]["options"]
    assert entry["sample_count"]["description"] == ["How many, stated on one line and a second.", WANTED["sample_count"]]
    assert entry["sample_stale"]["description"] == ["What it is.", "More.", WANTED["sample_stale"]]
    assert entry["sample_free"]["description"] == ["Anything goes."]
    assert entry["sample_nested"]["description"] == ["A list of dicts.", WANTED["sample_nested"]]
    assert entry["sample_nested"]["options"]["inner"]["description"] == "Not a variable; never given a sentence."
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "  other:\n    options: *sample\n" in text
    assert SCRIPT.render(text, WANTED.get, cc.DOC_PREFIX) == text  # a second run changes nothing


def literal(value):
    """Whether a default is plain data (no Jinja: it is only known in a play)."""
    if isinstance(value, str):
        return "{{" not in value
    if isinstance(value, list):
        return all(literal(item) for item in value)
    if isinstance(value, dict):
        return all(literal(key) and literal(item) for key, item in value.items())
    return True


def test_each_literal_default_is_the_documented_one_and_passes_its_type_and_bound():
    wrong, values = [], {}
    for path in SPEC_FILES:
        role = os.path.dirname(os.path.dirname(path))
        defaults_file = os.path.join(role, "defaults", "main.yml")
        if not os.path.exists(defaults_file):
            continue
        with open(defaults_file) as handle:
            defaults = yaml.safe_load(handle) or {}
        documented = DOCUMENTS[path]["argument_specs"]["main"]["options"]
        for name, value in defaults.items():
            if not literal(value):
                continue
            values[name] = value
            if "default" in documented.get(name, {}) and documented[name]["default"] != value:
                wrong.append("%s: defaults/main.yml has %r, the argument spec documents %r" % (
                    name, value, documented[name]["default"]))
    _config, _converted, problems = cc.check_values(SPECS, values)
    assert wrong + problems == []
    assert len(values) > 100
