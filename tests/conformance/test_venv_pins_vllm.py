"""The venv role's huggingface_hub pin fits the real vLLM 0.25.1.

The conformance venv holds vLLM 0.25.1 with the transformers and tokenizers
it resolves; their own metadata (Requires-Dist) must admit the huggingface_hub
version that roles/venv/defaults/main.yml pins (and scripts/hf-venv.sh gives
the staging tests), and it is the huggingface_hub the conformance tests run.
"""
import json
import os
import subprocess

import yaml

from helpers import ROOT
from helpers.collection import collections_path

collections_path()
from ansible_collections.laguna.spark.plugins.module_utils import venv_pins  # noqa: E402

REQUIRES = r'''
import importlib.metadata as md, json, sys
from packaging.requirements import Requirement
version = sys.argv[1]
out = {"installed": md.version("huggingface_hub"), "vllm": md.version("vllm"), "requirers": {}}
for dist in md.distributions():
    for text in dist.requires or []:
        req = Requirement(text)
        if req.name.lower().replace("_", "-") != "huggingface-hub":
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        out["requirers"][dist.metadata["Name"]] = [str(req.specifier), req.specifier.contains(version)]
print(json.dumps(out))
'''


def test_role_pin_is_admitted_by_vllm_dependencies(vllm_python):
    with open(os.path.join(ROOT, "roles", "venv", "defaults", "main.yml")) as handle:
        pins = dict(venv_pins.parse_pin(pin) for pin in yaml.safe_load(handle)["venv_pins"])
    version = pins["huggingface-hub"]
    assert version, "huggingface_hub is not pinned to a version in the venv role"
    out = subprocess.run([vllm_python, "-c", REQUIRES, version], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["vllm"] == pins["vllm"] == "0.25.1"
    assert report["installed"] == version
    # transformers (vLLM requires >=5.5.3) and tokenizers bound huggingface_hub.
    assert {"transformers", "tokenizers"} <= set(report["requirers"]), report["requirers"]
    refused = {name: spec for name, (spec, ok) in report["requirers"].items() if not ok}
    assert not refused, "huggingface_hub==%s is outside %s" % (version, refused)
