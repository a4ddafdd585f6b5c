# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""vllm_api_down: why the vLLM API did not come up, from the unit's state and its
log (the logic: vllm_health.down_message() in plugins/module_utils/vllm_health.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import vllm_health


def vllm_api_down(journal_lines, url, retries, delay, unit, unit_state, tensor_parallel_size):
    """The failure message of vllm_serve's verify when /v1/models never answered."""
    if isinstance(journal_lines, (str, bytes)) or not hasattr(journal_lines, "__iter__"):
        raise AnsibleFilterError("vllm_api_down: the input must be the journal's lines (stdout_lines)")
    if not isinstance(unit_state, Mapping):
        raise AnsibleFilterError("vllm_api_down: unit_state must be a systemd_user_unit result")
    try:
        waited = int(retries) * int(delay)
    except (TypeError, ValueError):
        raise AnsibleFilterError("vllm_api_down: retries and delay must be whole numbers, not %r and %r"
                                 % (retries, delay))
    return vllm_health.down_message(url, waited, unit, unit_state.get("active_state"), unit_state.get("result"),
                                    [str(line) for line in journal_lines], tensor_parallel_size)


class FilterModule(object):
    def filters(self):
        return {"vllm_api_down": vllm_api_down}
