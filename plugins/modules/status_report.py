#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: status_report
short_description: Judge what a role's status tasks read, as one report with its problems
version_added: "0.2.0"
description:
  - Builds the read-only report of the C(staging), C(ray_cluster) or
    C(vllm_serve) role (the facts C(staging_report), C(ray_cluster_report)
    and C(vllm_serve_report)) from what the role's status tasks read, and
    says what is wrong and how to fix it.
  - Pure computation on its inputs; it reads nothing on the host and
    changes nothing. It runs on the controller (an action plugin of the same
    name), so nothing is sent to the node.
attributes:
  check_mode:
    support: full
    description: The same report in check mode.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.attributes.controller]
options:
  kind:
    description: Which role's report to build.
    type: str
    required: true
    choices: [staging, ray_cluster, vllm_serve]
  scans:
    description:
      - O(kind=staging) The M(laguna.spark.model_stage_info) results of this
        node's checkpoints, each with C(item), the C(staging_artifacts) entry.
    type: list
    elements: dict
    default: []
  head_scans:
    description:
      - O(kind=staging) On a worker, the head's results in the same order; a
        worker's copy must equal the head's.
    type: list
    elements: dict
    default: []
  is_head:
    description: O(kind=staging) Whether this node is the head.
    type: bool
    default: true
  head_host:
    description: O(kind=staging) and O(kind=vllm_serve) The head's inventory name (for the messages).
    type: str
    default: ""
  nodes:
    description:
      - O(kind=ray_cluster) The raylets of the nodes in this play, each with
        C(host), C(unit), C(state), C(result) and C(linger), and C(loaded)
        (false when the unit is not loaded at all); nodes outside the play
        are judged by O(ray_status) alone.
    type: list
    elements: dict
    default: []
  ray_status:
    description: O(kind=ray_cluster) A M(laguna.spark.ray_status) result.
    type: dict
    default: {}
  expected_nodes:
    description: O(kind=ray_cluster) Nodes the cluster must show.
    type: int
    default: 1
  expected_gpus:
    description: O(kind=ray_cluster) GPUs the cluster must show.
    type: float
    default: 1
  address:
    description: O(kind=ray_cluster) The head's GCS address, O(kind=vllm_serve) the API's base URL.
    type: str
    default: ""
  gid_index:
    description: O(kind=ray_cluster) The NCCL GID index in use (reported as is).
    type: raw
  unit:
    description: O(kind=vllm_serve) The vLLM unit's name.
    type: str
    default: ""
  unit_state:
    description: O(kind=vllm_serve) Its ActiveState.
    type: str
    default: ""
  served_model_name:
    description: O(kind=vllm_serve) The model name the API must list.
    type: str
    default: ""
  models:
    description: O(kind=vllm_serve) The M(ansible.builtin.uri) result of C(GET /v1/models) (C(status), C(json)).
    type: dict
    default: {}
  speculative:
    description: O(kind=vllm_serve) Whether a draft is configured.
    type: bool
    default: false
  spec:
    description: O(kind=vllm_serve) A M(laguna.spark.vllm_spec_decode_info) result.
    type: dict
    default: {}
  unit_loaded:
    description:
      - O(kind=vllm_serve) Whether the unit is loaded at all. A unit that is
        not (a transient unit after a node restart) is reported as gone, with
        how to bring it back.
    type: bool
    default: true
  persistent:
    description:
      - O(kind=ray_cluster) and O(kind=vllm_serve) Whether the services are
        meant to be persistent units (C(laguna_persistent_units)); it changes
        the advice for a unit that is gone.
    type: bool
    default: false
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Record what is staged
  laguna.spark.status_report:
    kind: staging
    scans: "{{ staging_scan.results }}"
    head_scans: "{{ staging_head_scan.results | default([]) }}"
    is_head: "{{ laguna_is_head }}"
    head_host: "{{ laguna_head_host }}"
  register: staging_status

- name: Judge the server
  laguna.spark.status_report:
    kind: vllm_serve
    unit: laguna-vllm
    unit_state: "{{ vllm_unit.active_state }}"
    address: http://127.0.0.1:8000
    served_model_name: laguna-s-2.1
    models: "{{ models }}"
"""

RETURN = r"""
report:
  description:
    - The report. Always has C(ok) (bool) and C(problems) (list of
      sentences, each naming the cause and the fix).
    - staging adds C(artifacts) (C(name), C(path), C(shards), C(bytes),
      C(complete), C(problems), C(summary) each).
    - ray_cluster adds C(nodes), C(node_count), C(gpus_total),
      C(pending_demands), C(gid_index) and C(summary).
    - vllm_serve adds C(unit), C(models), C(url), C(draft_tokens),
      C(accepted_tokens) and C(acceptance_rate).
  returned: success
  type: dict
  sample: {"ok": false, "problems": ["laguna-vllm is failed", "http://127.0.0.1:8000/v1/models does not answer"]}
"""


from ansible_collections.laguna.spark.plugins.module_utils import status_reports
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    # A task runs the action plugin of the same name, on the controller; this
    # is the same judgement where the module itself is run (and what
    # ansible-test checks the documentation against).
    module = new_module(status_reports.ARGUMENT_SPEC)
    module.exit_json(changed=False, report=status_reports.build(module.params))


if __name__ == "__main__":
    main()
