#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: venv_probe
short_description: Read in one call everything the venv role checks on a node
version_added: "0.2.0"
description:
  - The venv role's probe. Reads, in this order, the dpkg status of each of
    O(system_packages) (C(dpkg-query -W -f '${db:Status-Status}'), installed
    when it prints C(installed)), the processes whose command line matches
    O(stray_pattern) (a C(pip install) an interrupted run left writing the
    venv; found as M(laguna.spark.stray_processes) finds them, never stopped
    here), the venv's pins as M(laguna.spark.venv_pins_info) compares them
    (the same keys), which of O(executables) have no entry in the venv's
    C(bin), and the output of C(nvcc --version) run with C(PATH) set to
    O(nvcc_path).
  - Returns, besides each read, one line per difference (RV(differences)), so
    that the role acts on exactly what differs and check mode says what a run
    would change.
  - Read-only.
options:
  system_packages:
    description: Debian packages that must be installed.
    type: list
    elements: str
    default: []
  stray_pattern:
    description:
      - Regular expression searched in each process's command line; every match is in RV(strays).
      - Omitted, no process is looked for.
    type: str
  executables:
    description: Names that must be in the venv's C(bin).
    type: list
    elements: str
    default: []
  nvcc_path:
    description:
      - C(PATH) to run C(nvcc --version) with (the raylets' PATH).
      - Omitted, nvcc is not run and RV(nvcc) is empty.
    type: str
attributes:
  check_mode:
    support: full
    description: Only reads (C(nvcc --version) included); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark,
                                 laguna.spark.venv_pins]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the venv
  laguna.spark.venv_probe:
    venv: /home/spark/venvs/vllm-025
    pins: [vllm==0.25.1, torch==2.11.0+cu130, ninja]
    extra_index_urls: [https://download.pytorch.org/whl/cu130]
    system_packages: [python3-venv]
    stray_pattern: "^/home/spark/venvs/vllm\\-025/bin/python\\ \\-m\\ pip\\ install\\ "
    executables: [vllm, ray, hf, ninja]
    nvcc_path: /home/spark/venvs/vllm-025/bin:/usr/local/cuda/bin:/usr/bin:/bin
  become: true
  become_user: spark
  register: venv_probe
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
system_packages:
  description: Each of O(system_packages) with its dpkg status (empty when dpkg-query is not there).
  returned: always
  type: dict
  sample: {"python3-venv": "installed"}
system_packages_missing:
  description: The packages of O(system_packages) whose status is not C(installed).
  returned: always
  type: list
  elements: str
strays:
  description: The processes matching O(stray_pattern) (pid, cmdline, unit, uid), as M(laguna.spark.stray_processes) reports them.
  returned: always
  type: list
  elements: dict
executables_missing:
  description: The names of O(executables) with no entry in the venv's C(bin).
  returned: always
  type: list
  elements: str
nvcc:
  description:
    - C(nvcc --version) on O(nvcc_path) - rc (127 when no nvcc is on that PATH), stdout, stderr, and msg (empty when
      it ran, else why not). Empty without O(nvcc_path).
  returned: always
  type: dict
  sample: {"rc": 0, "stdout": "Cuda compilation tools, release 13.0, V13.0.88", "stderr": "", "msg": ""}
differences:
  description: One line per difference from what the venv role wants.
  returned: always
  type: list
  elements: str
  sample: ["pins to install: vllm==0.25.1 (installed: None)"]
"""

from ansible_collections.laguna.spark.plugins.module_utils import venv_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        venv=dict(type="path", required=True),
        pins=dict(type="list", elements="str", required=True),
        index_url=dict(type="str"),
        extra_index_urls=dict(type="list", elements="str", default=[]),
        pip_args=dict(type="list", elements="str", default=[]),
        system_packages=dict(type="list", elements="str", default=[]),
        stray_pattern=dict(type="str"),
        executables=dict(type="list", elements="str", default=[]),
        nvcc_path=dict(type="str"),
    ))
    module.exit_json(changed=False, **venv_probe.probe(module, module.params))


if __name__ == "__main__":
    main()
