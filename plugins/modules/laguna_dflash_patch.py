#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: laguna_dflash_patch
short_description: Guard vLLM's DFlash Laguna loader against quant configs without get_cache_scale
version_added: "0.1.0"
description:
  - Inserts C(hasattr(self.quant_config, "get_cache_scale")) into the
    KV-cache-scale condition of C(DFlashLagunaModel.load_weights) in vLLM's
    C(model_executor/models/laguna_dflash.py). Without it a W4A16 DFlash draft
    fails to load.
  - Whether the file is already patched is decided on the parsed code
    (Python's C(ast)), not on text. A C(self.quant_config.get_cache_scale(...))
    call in the method is guarded when the C(hasattr) check is evaluated
    before it in its condition (an earlier operand of the C(and), or the test
    of an enclosing C(if)). The guard quoted in a comment, a string, a
    docstring or another function does not count, and the guard is then
    inserted into the real condition.
  - Idempotent; supports check mode and diff mode; can keep a backup.
  - Fails, changing nothing, when the file is missing, when the method has no
    C(get_cache_scale) call of the shape the patch knows, or when the patched
    file would not parse or would leave a call unguarded (vLLM version drift).
options:
  path:
    description: Path of C(laguna_dflash.py). Mutually exclusive with O(venv).
    type: path
  venv:
    description:
      - Python virtualenv holding vLLM; the file is looked up under its
        C(lib/python*/site-packages/vllm/model_executor/models/).
    type: path
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: true
  class_name:
    description: Class whose method is patched.
    type: str
    default: DFlashLagunaModel
  method_name:
    description: Method that is patched.
    type: str
    default: load_weights
attributes:
  check_mode:
    support: full
    description: Reports whether the file would be patched and writes nothing.
  diff_mode:
    support: full
    description: Shows the patched region of the file before and after.
extends_documentation_fragment: [laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Patch vLLM in the serving venv
  laguna.spark.laguna_dflash_patch:
    venv: /home/spark/.venvs/vllm

- name: Is it patched? (read-only)
  laguna.spark.laguna_dflash_patch:
    path: /opt/vllm/lib/python3.12/site-packages/vllm/model_executor/models/laguna_dflash.py
  check_mode: true
  register: patch
"""

RETURN = r"""
path:
  description: The file that was examined.
  returned: when the file was found
  type: str
patch_state:
  description: C(patched) when this run added the guard (or would, in check mode), C(already_patched) otherwise.
  returned: success
  type: str
  sample: already_patched
backup_file:
  description: Copy of the original file.
  returned: when a backup was made
  type: str
"""

import glob
import os

from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible_collections.laguna.spark.plugins.module_utils import dflash_patch, files
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

RELATIVE = os.path.join("vllm", "model_executor", "models", "laguna_dflash.py")


def locate(module):
    if module.params["path"]:
        path = module.params["path"]
        if not os.path.isfile(path):
            module.fail_json(msg="%s does not exist: is vLLM installed there, with Laguna DFlash support?" % path)
        return path
    venv = module.params["venv"]
    pattern = os.path.join(venv, "lib", "python*", "site-packages", RELATIVE)
    found = sorted(glob.glob(pattern))
    if not found:
        module.fail_json(
            msg="No %s under %s (looked for %s): is this the venv vLLM is installed in, "
                "and does its vLLM ship Laguna DFlash?" % (RELATIVE, venv, pattern))
    if len(found) > 1:
        module.fail_json(msg="Several vLLM installs under %s: %s; pass path=" % (venv, ", ".join(found)))
    return found[0]


def main():
    module = new_module(dict(
        path=dict(type="path"),
        venv=dict(type="path"),
        backup=dict(type="bool", default=True),
        class_name=dict(type="str", default="DFlashLagunaModel"),
        method_name=dict(type="str", default="load_weights"),
    ), mutually_exclusive=[("path", "venv")], required_one_of=[("path", "venv")])
    path = locate(module)
    with open(path, "rb") as handle:
        before = to_text(handle.read(), errors="surrogate_or_strict")
    try:
        after, state = dflash_patch.patch_source(
            before, module.params["class_name"], module.params["method_name"])
    except dflash_patch.PatchError as exc:
        module.fail_json(msg="%s: %s" % (path, exc), path=path)

    result = dict(changed=state == "patched", path=path, patch_state=state)
    if result["changed"] and module._diff:
        result["diff"] = dict(before=before, after=after,
                              before_header=path, after_header=path + " (guarded)")
    if result["changed"] and not module.check_mode:
        if module.params["backup"]:
            result["backup_file"] = module.backup_local(path)
        files.write_atomic(module, path, to_bytes(after, errors="surrogate_or_strict"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
