#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_processes
short_description: Which processes hold the node's GPU, and whether the cluster's own units run them
version_added: "0.3.0"
description:
  - Runs C(nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv,noheader,nounits) and finds, from C(/proc), the systemd unit,
    owner and command line of each process with a CUDA context (run it as
    root to see every user's processes).
  - A process outside O(allowed_units) is foreign. Ray's accounting sees
    only Ray's jobs; a notebook, a training job or a vLLM in a container
    holds the GPU without Ray knowing, and on a GB10 it takes from the same
    unified memory vLLM plans with.
  - Only compute contexts count. The desktop of DGX OS (Xorg, gnome-shell)
    holds graphics contexts, which this query does not list.
  - O(foreign=fail) fails naming each foreign process and the fix,
    O(foreign=warn) only warns.
  - Read-only.
attributes:
  platform:
    support: full
    platforms: linux
    description: Linux with the NVIDIA driver (DGX Spark, Ubuntu 24.04).
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.read_only]
options:
  nvidia_smi:
    description: The nvidia-smi executable.
    type: str
    default: nvidia-smi
  allowed_units:
    description:
      - Units whose processes may hold the GPU (names with or without C(.service)), that is
        the raylets, whose Ray workers are vLLM's tensor-parallel ranks, and vLLM.
    type: list
    elements: str
    required: true
  foreign:
    description: C(fail) fails when a foreign process holds the GPU; C(warn) only warns.
    type: str
    choices: [fail, warn]
    default: fail
  node:
    description: The node's name in messages (the inventory name when delegating).
    type: str
  timeout:
    description: Seconds nvidia-smi may take (1 to 300).
    type: int
    default: 30
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Only the cluster's own processes hold a GPU
  laguna.spark.gpu_processes:
    allowed_units: [laguna-ray-head, laguna-ray-worker, laguna-vllm]
    node: "{{ item }}"
  delegate_to: "{{ item }}"
  loop: "{{ groups['spark_head'] + groups['spark_workers'] }}"
  become: true
"""

RETURN = r"""
processes:
  description: Every process holding the GPU.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 5120, "name": "ray::RayWorkerProc.run", "used_mib": 91420, "unit": "laguna-ray-worker.service",
            "uid": 1000, "user": "spark", "cmdline": "ray::RayWorkerProc.run", "owned": true}]
foreign:
  description: The processes of RV(processes) outside O(allowed_units).
  returned: always
  type: list
  elements: dict
message:
  description: What holds the GPU outside the cluster's units and what to do ("" when nothing).
  returned: always
  type: str
"""

import socket

from ansible_collections.laguna.spark.plugins.module_utils import gpu_procs
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        nvidia_smi=dict(type="str", default="nvidia-smi"),
        allowed_units=dict(type="list", elements="str", required=True),
        foreign=dict(type="str", choices=["fail", "warn"], default="fail"),
        node=dict(type="str"),
        timeout=dict(type="int", default=30),
    ))
    p = module.params
    if not 1 <= p["timeout"] <= 300:
        module.fail_json(msg="timeout must be 1 to 300 seconds, not %d" % p["timeout"])
    node = p["node"] or socket.gethostname()
    smi = module.get_bin_path(p["nvidia_smi"]) if "/" not in p["nvidia_smi"] else p["nvidia_smi"]
    read = gpu_procs.read(module.run_command, smi, p["allowed_units"], node, p["timeout"])
    if read["error"]:
        module.fail_json(msg=("%s: " % p["nvidia_smi"] if not smi else "") + read["error"])
    foreign, message = read["foreign"], read["message"]
    result = dict(changed=False, processes=read["processes"], foreign=foreign, message=message)
    if foreign and p["foreign"] == "fail":
        module.fail_json(msg=message, **result)
    if foreign:
        module.warn(message)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
