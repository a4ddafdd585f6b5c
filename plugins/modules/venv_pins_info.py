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
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads the installed packages; the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark,
                                 laguna.spark.venv_pins]
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
    module.exit_json(changed=False, **venv_pins.compare(module, p["venv"], p["pins"], p["index_url"],
                                                        p["extra_index_urls"], p["pip_args"]))


if __name__ == "__main__":
    main()
