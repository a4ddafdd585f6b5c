#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_probe
short_description: Read in one call everything the vllm_serve role checks on a node
version_added: "0.2.0"
description:
  - The vllm_serve role's probe. Each option asks for one read; the role asks
    on every cluster node for O(raylet_unit) and O(gpu), and on the head for
    the rest.
  - O(raylet_unit) reads the raylet's user unit (C(systemctl --user show) -
    ActiveState, SubState, UnitFileState and InvocationID among them).
    O(gpu) lists the processes holding the GPU as M(laguna.spark.gpu_processes)
    does, and which of them run outside O(gpu.allowed_units).
  - O(unit) reads the vLLM unit as M(laguna.spark.systemd_run_service) would,
    given the same options, and returns what it would do (in RV(unit), its
    action and whether it changes anything) without doing it - the configuration fingerprint in the
    unit's Description, ActiveState, SubState and UnitFileState, a unit file and
    private environment file that differ, processes a signal stopped.
  - O(port) lists the listeners of the API port as M(laguna.spark.port_listeners)
    does (run as the service user, another user's listener is listed by its
    uid, with no pid, and counts as foreign; the role then reads the port again
    as root to name it); O(draft) inspects the DFlash draft as M(laguna.spark.dflash_draft_info)
    does; O(ray) runs C(ray status) once as M(laguna.spark.ray_status) does (no wait).
  - O(api) sends the hang check of M(laguna.spark.vllm_health) (C(/health),
    then the recipe's smoke test, within O(api.timeout)), and when C(/health)
    answers, C(GET /v1/models) and, with O(api.check_acceptance), reads the
    spec-decode counters (C(/metrics)), each within O(api.timeout) and 10 s.
  - Returns, besides each read, one line per difference from what the role
    wants (RV(differences)), so that the role acts on exactly that and check
    mode says what a run would change. Changes nothing.
options:
  node:
    description: The node's name in messages; default the host name.
    type: str
  raylet_unit:
    description: The raylet's user unit to read (run as the service user).
    type: str
  gpu:
    description: Which processes may hold the GPU.
    type: dict
    suboptions:
      nvidia_smi:
        description: nvidia-smi, a path or a name on PATH.
        type: str
        default: nvidia-smi
      allowed_units:
        description: The units whose processes may hold the GPU.
        type: list
        elements: str
        required: true
      timeout:
        description: Seconds nvidia-smi may take (1 to 300).
        type: int
        default: 30
  unit:
    description:
      - The vLLM unit, as M(laguna.spark.systemd_run_service) is given it (with its C(state=started)).
    type: dict
    suboptions:
      name:
        description: Unit name, without C(.service).
        type: str
        required: true
      command:
        description: The program and its arguments.
        type: list
        elements: str
        required: true
      environment:
        description: Environment of the service.
        type: dict
        default: {}
      properties:
        description: Unit properties.
        type: dict
        default: {}
      description:
        description: Human-readable description (the fingerprint is appended).
        type: str
        default: laguna-spark service
      persistent:
        description: A unit file with C(Restart=always) instead of a transient unit.
        type: bool
        default: false
      after:
        description: Units a persistent unit wants and starts after.
        type: list
        elements: str
        default: []
      restart_sec:
        description: C(RestartSec=) of a persistent unit (1 to 3600).
        type: int
        default: 10
      start_limit_interval:
        description: C(StartLimitIntervalSec=) of a persistent unit (1 to 86400).
        type: int
        default: 600
      start_limit_burst:
        description: C(StartLimitBurst=) of a persistent unit (1 to 1000).
        type: int
        default: 20
      secret_environment:
        description: The service's private environment (compared through its keyed digest; never returned).
        type: dict
        default: {}
      secret_environment_files:
        description:
          - More of it, each value read from the file named on the head (the Ray token), as
            M(laguna.spark.systemd_run_service) reads it.
        type: dict
        default: {}
  port:
    description: The API port and the unit that may listen on it.
    type: dict
    suboptions:
      port:
        description: TCP port (1 to 65535).
        type: int
        required: true
      allowed_unit:
        description: The unit whose processes may listen; unset, none is foreign.
        type: str
  draft:
    description: The DFlash draft to inspect, as M(laguna.spark.dflash_draft_info) is given it.
    type: dict
    suboptions:
      path:
        description: The draft's directory.
        type: path
        required: true
      target_path:
        description: The target checkpoint's directory.
        type: path
      draft_repo:
        description: The draft's Hub repository.
        type: str
      draft_target_family:
        description: Target precision the draft was built for, when no name tells it.
        type: str
        choices: [NVFP4, MXFP4, FP8, INT4, INT8, BF16]
  checkpoints:
    description:
      - The checkpoints vLLM loads, each scanned as the staging role's status scans it
        (M(laguna.spark.model_stage_info), against the digest record's file list); returned in
        RV(checkpoints) for M(laguna.spark.status_report) to judge (kind staging).
    type: dict
    suboptions:
      artifacts:
        description:
          - The staging role's C(staging_artifacts) - each with C(name), C(path) and C(expected_shards) (null
            or absent - at least one shard); its other keys are not read.
        type: list
        elements: dict
        required: true
      shard_pattern:
        description: Glob of the weight shards.
        type: str
        default: "*.safetensors"
      hash_cache:
        description: The digest record whose file lists name each checkpoint's files.
        type: path
  ray:
    description: C(ray status) against the cluster.
    type: dict
    suboptions:
      ray:
        description: The C(ray) executable.
        type: path
        required: true
      address:
        description: The head's GCS address.
        type: str
        required: true
      timeout:
        description: Seconds C(ray status) may take (at least 5).
        type: int
        default: 60
      tensor_parallel_size:
        description: GPUs vLLM needs (one per tensor-parallel rank).
        type: int
        required: true
  api:
    description: vLLM's API.
    type: dict
    suboptions:
      url:
        description: Base URL of the server.
        type: str
        required: true
      api_key:
        description: The server's API key, sent as a Bearer token; never logged.
        type: str
      timeout:
        description: Seconds for C(/health), and for the smoke test unless O(api.smoke.timeout) says otherwise.
        type: int
        default: 30
      served_model_name:
        description: The model C(/v1/models) must list.
        type: str
        required: true
      check_acceptance:
        description: Read the spec-decode counters; none accepted is a difference.
        type: bool
        default: false
      smoke:
        description: The recipe's smoke test and how its answer is judged (as M(laguna.spark.vllm_health)'s O(laguna.spark.vllm_health#module:smoke)).
        type: dict
        suboptions:
          model:
            description: The served model name to ask.
            type: str
            required: true
          prompt:
            description: The question.
            type: str
            required: true
          max_tokens:
            description: The answer's length limit.
            type: int
            default: 8
          expect:
            description: Text the answer must hold (case aside); empty, any non-empty answer passes.
            type: str
            default: ""
          timeout:
            description: Seconds to wait for the answer; unset, O(api.timeout).
            type: int
attributes:
  check_mode:
    support: full
    description: >-
      Only reads (C(systemctl show), nvidia-smi, C(ray status), C(/proc), GET requests and one chat completion,
      which change nothing); the same result in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.dgx_spark]
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read each node's raylet and GPU
  laguna.spark.vllm_serve_probe:
    node: "{{ item }}"
    raylet_unit: laguna-ray-worker
    gpu:
      allowed_units: [laguna-ray-head, laguna-ray-worker, laguna-vllm]
  delegate_to: "{{ item }}"
  loop: "{{ groups['spark'] }}"
  become: true
  become_user: spark

- name: Read the head's vLLM
  laguna.spark.vllm_serve_probe:
    unit:
      name: laguna-vllm
      command: [/home/spark/venvs/vllm-025/bin/vllm, serve, /home/spark/models/laguna]
    port: {port: 8000, allowed_unit: laguna-vllm.service}
    ray: {ray: /home/spark/venvs/vllm-025/bin/ray, address: "10.0.0.1:6379", tensor_parallel_size: 2}
    api:
      url: http://127.0.0.1:8000
      served_model_name: laguna-s-fp8
      smoke: {model: laguna-s-fp8, prompt: "capital of France? one word", expect: Paris}
  become: true
  become_user: spark
  register: probe
"""

RETURN = r"""
raylet:
  description: The raylet unit as M(laguna.spark.systemd_user_unit) reports a unit (its properties hold InvocationID).
  returned: with O(raylet_unit)
  type: dict
gpu:
  description: The processes holding the GPU (processes, foreign, message, error), as M(laguna.spark.gpu_processes) returns them.
  returned: with O(gpu)
  type: dict
unit:
  description:
    - The vLLM unit - unit, changed and action (what M(laguna.spark.systemd_run_service) would do - none, started,
      restarted or enabled), fingerprint and previous_fingerprint, stopped_pids, wanted_persistent, from_file,
      has_file, secret_differs, start_env_drift, and state (its state as M(laguna.spark.systemd_user_unit) reports it).
  returned: with O(unit)
  type: dict
port:
  description: The API port's listeners, those of another unit (foreign), and the message naming them.
  returned: with O(port)
  type: dict
checkpoints:
  description:
    - Per entry of O(checkpoints.artifacts), in order, what M(laguna.spark.model_stage_info) returns, with
      C(item) (the entry's name and path), as the staging role's status scans it.
  returned: with O(checkpoints)
  type: list
  elements: dict
draft:
  description: The draft's report, as M(laguna.spark.dflash_draft_info) returns it.
  returned: with O(draft)
  type: dict
ray:
  description: One C(ray status), as M(laguna.spark.ray_status) returns it (reachable, node_count, gpus_*, stderr_tail).
  returned: with O(ray)
  type: dict
api:
  description:
    - health (as M(laguna.spark.vllm_health) returns it, its smoke test included), models (as
      M(laguna.spark.vllm_models_info)), spec (the spec-decode counters, as M(laguna.spark.vllm_spec_decode_info)),
      and verified (what the role's verification checks holds - the model listed, the smoke test answered,
      draft tokens accepted when asked).
  returned: with O(api)
  type: dict
differences:
  description: One line per difference from what the vllm_serve role wants.
  returned: always
  type: list
  elements: str
  sample: ["laguna-vllm.service: ActiveState inactive (SubState dead), wanted active"]
"""

import socket

from ansible_collections.laguna.spark.plugins.module_utils import dflash_config, vllm_health, vllm_serve_probe
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module

BOUNDS = (("gpu", "timeout", 1, 300), ("unit", "restart_sec", 1, 3600), ("unit", "start_limit_interval", 1, 86400),
          ("unit", "start_limit_burst", 1, 1000), ("port", "port", 1, 65535), ("ray", "timeout", 5, 3600),
          ("api", "timeout", 1, 3600))


def main():
    module = new_module(dict(
        node=dict(type="str"),
        raylet_unit=dict(type="str"),
        gpu=dict(type="dict", options=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            allowed_units=dict(type="list", elements="str", required=True),
            timeout=dict(type="int", default=30))),
        unit=dict(type="dict", options=dict(
            name=dict(type="str", required=True),
            command=dict(type="list", elements="str", required=True),
            environment=dict(type="dict", default={}),
            properties=dict(type="dict", default={}),
            description=dict(type="str", default="laguna-spark service"),
            persistent=dict(type="bool", default=False),
            after=dict(type="list", elements="str", default=[]),
            restart_sec=dict(type="int", default=10),
            start_limit_interval=dict(type="int", default=600),
            start_limit_burst=dict(type="int", default=20),
            secret_environment=dict(type="dict", default={}, no_log=True),
            secret_environment_files=dict(type="dict", default={}, no_log=False))),
        port=dict(type="dict", options=dict(
            port=dict(type="int", required=True),
            allowed_unit=dict(type="str"))),
        draft=dict(type="dict", options=dict(
            path=dict(type="path", required=True),
            target_path=dict(type="path"),
            draft_repo=dict(type="str"),
            draft_target_family=dict(type="str", choices=list(dflash_config.FAMILIES)))),
        checkpoints=dict(type="dict", options=dict(
            artifacts=dict(type="list", elements="dict", required=True),
            shard_pattern=dict(type="str", default="*.safetensors"),
            hash_cache=dict(type="path"))),
        ray=dict(type="dict", options=dict(
            ray=dict(type="path", required=True),
            address=dict(type="str", required=True),
            timeout=dict(type="int", default=60),
            tensor_parallel_size=dict(type="int", required=True))),
        api=dict(type="dict", options=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="int", default=30),
            served_model_name=dict(type="str", required=True),
            check_acceptance=dict(type="bool", default=False),
            smoke=vllm_health.SMOKE_OPTIONS)),
    ))
    params = module.params
    for option, key, low, high in BOUNDS:
        if params[option] and not low <= params[option][key] <= high:
            module.fail_json(msg="%s.%s must be between %d and %d, not %d"
                             % (option, key, low, high, params[option][key]))
    result = vllm_serve_probe.probe(module, params, params["node"] or socket.gethostname())
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
