"""The options a doc fragment documents are declared once, in module_utils, next to the code that
uses them: vllm_client.server_options() (fragment vllm_server) and model_stage.checkpoint_options()
(fragment checkpoint). Each declares exactly what its fragment documents."""
import ast
import os

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import model_stage, vllm_client

from helpers import ROOT

SPEC_KEYS = ("type", "default", "required", "choices", "elements")


def fragment_options(name):
    body = ast.parse(open(os.path.join(ROOT, "plugins", "doc_fragments", name + ".py")).read()).body
    cls = next(node for node in body if isinstance(node, ast.ClassDef))
    text = next(node.value.value for node in cls.body
                if isinstance(node, ast.Assign) and node.targets[0].id == "DOCUMENTATION")
    return yaml.safe_load(text)["options"]


@pytest.mark.parametrize("fragment, options", [("vllm_server", vllm_client.server_options),
                                               ("checkpoint", model_stage.checkpoint_options)])
def test_the_shared_options_are_the_ones_their_fragment_documents(fragment, options):
    documented = fragment_options(fragment)
    declared = options()
    assert sorted(declared) == sorted(documented)
    for name, spec in declared.items():
        assert {k: spec.get(k) for k in SPEC_KEYS} == {k: documented[name].get(k) for k in SPEC_KEYS}, name
    again = options()  # a new dict each call: a module may change its own
    assert again == declared and all(again[name] is not declared[name] for name in declared)


def test_the_api_key_is_never_logged():
    assert vllm_client.server_options()["api_key"]["no_log"] is True
