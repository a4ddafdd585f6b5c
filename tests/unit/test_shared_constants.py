"""tests/helpers/constants.py against where each value comes from: the roles' defaults, the
recipe's text and the molecule scenario. The suites share these constants; this keeps them true."""
import os
import re

import yaml

from helpers import ROOT, constants as c, recipe


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_served_model_and_units_are_the_roles_defaults():
    serve = _yaml("roles", "vllm_serve", "defaults", "main.yml")
    laguna = _yaml("roles", "laguna", "defaults", "main.yml")
    assert serve["vllm_serve_served_model_name"] == c.SERVED_MODEL
    assert serve["vllm_serve_max_model_len"] == c.MAX_MODEL_LEN
    assert laguna["laguna_api_port"] == c.API_PORT
    assert (laguna["laguna_vllm_unit"], laguna["laguna_ray_head_unit"], laguna["laguna_ray_worker_unit"]) == (
        c.VLLM_UNIT, c.RAY_HEAD_UNIT, c.RAY_WORKER_UNIT)
    assert _yaml("roles", "firewall", "vars", "main.yml")["firewall_unit"] == c.FIREWALL_UNIT


def test_the_figures_are_the_recipes():
    text = recipe.read_recipe()
    assert "--served-model-name %s " % c.SERVED_MODEL in text
    assert "--max-model-len %d " % c.MAX_MODEL_LEN in text
    assert "GPU KV cache size: {:,} tokens ... {:.2f}x".format(c.KV_CACHE_TOKENS, c.MAX_CONCURRENCY) in text
    assert "Full {:,}-token context".format(c.MAX_MODEL_LEN) in text


def test_the_molecule_constants_are_the_scenarios():
    scenario = _yaml("molecule", "default", "molecule.yml")
    ips = {p["name"]: p["ip"] for p in scenario["platforms"]}
    groups = {p["name"]: p["groups"] for p in scenario["platforms"]}
    assert ips == c.MOLECULE_ROCE_IP
    assert groups == {c.MOLECULE_HEAD: ["spark_head"], c.MOLECULE_WORKER: ["spark_workers"]}
    inventory = scenario["provisioner"]["inventory"]["group_vars"]["all"]
    assert inventory["laguna_user"] == c.MOLECULE_USER
    assert inventory["vllm_serve_api_key"] == c.MOLECULE_API_KEY
    assert inventory["vllm_serve_health_timeout"] == c.MOLECULE_HEALTH_TIMEOUT
    assert inventory["vllm_serve_environment"]["LAGUNA_STANDIN_WEDGE_FILE"] == c.MOLECULE_WEDGE_FILE
    laguna = _yaml("roles", "laguna", "defaults", "main.yml")
    # The roles' paths under the service user's home (getent's, /home/<user> in the node image).
    home = "/home/" + c.MOLECULE_USER
    assert c.MOLECULE_HOME == home
    assert laguna["laguna_venv"].replace("{{ laguna_home }}", home) == c.MOLECULE_VENV
    assert laguna["laguna_model_path"].replace("{{ laguna_home }}", home) == c.MOLECULE_MODEL
    assert laguna["laguna_draft_path"].replace("{{ laguna_home }}", home) == c.MOLECULE_DRAFT
    assert os.path.dirname(c.MOLECULE_MODEL) == os.path.dirname(c.MOLECULE_DRAFT) == c.MOLECULE_MODELS
    assert laguna["laguna_ray_auth_token_path"].replace("{{ laguna_home }}", home) == c.MOLECULE_RAY_TOKEN_PATH


def test_the_molecule_user_is_the_node_images():
    with open(os.path.join(ROOT, "scripts", "build-node-image.sh")) as handle:
        script = handle.read()
    assert re.search(r"^NODE_USER=%s$" % c.MOLECULE_USER, script, re.M)
    assert re.search(r"^NODE_UID=%d$" % c.MOLECULE_UID, script, re.M)
