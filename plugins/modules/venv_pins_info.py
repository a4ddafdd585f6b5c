#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: venv_pins_info
short_description: Tell which pinned packages a Python venv lacks, and the pip command that installs them
version_added: "0.2.0"
description:
  - Runs C(<venv>/bin/python -m pip list --format json) and compares the
    result with O(pins) (C(name==version), exact, or a bare C(name)).
  - A pin with extras (C(ray[default]==2.60.0)) is met only when the
    requirements its extras add are installed too, which the venv's python
    reads from the distribution's metadata.
  - Returns the pins not met and the C(pip install) command line the venv role
    runs when there are any, so a rerun with the same pins installs nothing.
  - Read-only.
options:
  venv:
    description: The venv's directory.
    type: path
    required: true
  pins:
    description: Requirements, e.g. C(vllm==0.25.1), C(torch==2.11.0+cu130), C(ninja).
    type: list
    elements: str
    required: true
  index_url:
    description: pip's C(--index-url).
    type: str
  extra_index_urls:
    description: pip's C(--extra-index-url)s.
    type: list
    elements: str
    default: []
  pip_args:
    description: Further pip install arguments.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Only reads the installed packages; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What is missing in the venv
  laguna.spark.venv_pins_info:
    venv: /home/spark/venvs/vllm-025
    pins: [vllm==0.25.1, torch==2.11.0+cu130, ninja]
    extra_index_urls: [https://download.pytorch.org/whl/cu130]
  register: pins
"""

RETURN = r"""
exists:
  description: Whether the venv's python exists.
  returned: always
  type: bool
installed:
  description: Installed distributions, PEP 503 name to version.
  returned: always
  type: dict
missing:
  description: Pins not met (pin, name, wanted, installed; for a pin with extras also extras_missing, the requirements its extras add that are not met).
  returned: always
  type: list
  elements: dict
install_argv:
  description: The pip command that installs every pin.
  returned: always
  type: list
  elements: str
  sample: [/home/spark/venvs/vllm-025/bin/python, -m, pip, install, --disable-pip-version-check, --no-input,
           --extra-index-url, "https://download.pytorch.org/whl/cu130", vllm==0.25.1, torch==2.11.0+cu130, ninja]
"""

import json
import os

from ansible_collections.laguna.spark.plugins.module_utils import venv_pins
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        venv=dict(type="path", required=True),
        pins=dict(type="list", elements="str", required=True),
        index_url=dict(type="str"),
        extra_index_urls=dict(type="list", elements="str", default=[]),
        pip_args=dict(type="list", elements="str", default=[]),
    ))
    p = module.params
    python = os.path.join(p["venv"], "bin", "python")
    try:
        for pin in p["pins"]:
            venv_pins.parse_pin(pin)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    argv = venv_pins.pip_install_argv(python, p["pins"], p["index_url"], p["extra_index_urls"], p["pip_args"])
    installed = {}
    extras_missing = {}
    exists = os.path.exists(python)
    if exists:
        rc, out, err = module.run_command([python, "-m", "pip", "list", "--format", "json",
                                           "--disable-pip-version-check"])
        if rc != 0:
            module.fail_json(msg="pip list failed in %s: %s" % (p["venv"], err.strip()), install_argv=argv)
        installed = venv_pins.installed_from_pip_list(out)
        query = venv_pins.extras_query(p["pins"])
        if query:
            rc, out, err = module.run_command([python, "-c", venv_pins.EXTRAS_CHECK, json.dumps(query)])
            if rc != 0:
                module.fail_json(msg="reading the extras' requirements failed in %s: %s" % (p["venv"], err.strip()),
                                 install_argv=argv)
            extras_missing = json.loads(out)
    module.exit_json(changed=False, exists=exists, installed=installed,
                     missing=venv_pins.unsatisfied(p["pins"], installed, extras_missing), install_argv=argv)


if __name__ == "__main__":
    main()
