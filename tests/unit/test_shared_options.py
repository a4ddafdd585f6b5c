"""What the modules share of their AnsibleModule: ansible_module.new_module (check mode supported,
the module's options and constraints), and the options a doc fragment documents, declared once in
module_utils next to the code that uses them: vllm_client.server_options() (fragment vllm_server)
and model_stage.checkpoint_options() (fragment checkpoint), each exactly what its fragment documents."""
import ast
import json
import os

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.laguna.spark.plugins.module_utils import model_stage, vllm_client
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

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


def test_new_module_supports_check_mode_and_applies_the_options_and_constraints(capsys):
    options = dict(path=dict(type="path"), venv=dict(type="path"), retries=dict(type="int", default=3))
    with patch_module_args({"path": "/x", "_ansible_check_mode": True}):
        module = new_module(options, mutually_exclusive=[("path", "venv")])
    assert module.check_mode and module.supports_check_mode
    assert module.params == {"path": "/x", "venv": None, "retries": 3}
    with patch_module_args({"path": "/x", "venv": "/y"}):
        with pytest.raises(SystemExit):
            new_module(options, mutually_exclusive=[("path", "venv")])
    assert "mutually exclusive: path|venv" in json.loads(capsys.readouterr().out)["msg"]
