# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""preflight_driver, preflight_space, preflight_roce: the preflight role's checks
of what its tasks read (the logic: plugins/module_utils/preflight.py)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import preflight


def _result(value, what, name):
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s: %s must be a task result" % (name, what))
    return value


def _slurped(result, name):
    """The text of a slurp result ("" when the read failed or was skipped)."""
    try:
        return base64.b64decode(_result(result, "a slurp", name).get("content") or "").decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise AnsibleFilterError("%s: a slurp's content is not base64: %s" % (name, exc))


def preflight_driver(command, minimum, host):
    """{ok, msg} of the driver version nvidia-smi printed (a command result)."""
    command = _result(command, "the input", "preflight_driver")
    explained = command["stderr"] if "stderr" in command else command.get("msg", "")
    return preflight.driver(command.get("rc"), command.get("stdout_lines"), explained, minimum, host)


def preflight_space(free_bytes, staged, min_free_gb, where, host):
    """{ok, needed, msg}: df's free bytes against min_free_gb less the staged checkpoints' total_bytes."""
    if isinstance(staged, (str, bytes, Mapping)) or not hasattr(staged, "__iter__"):
        raise AnsibleFilterError("preflight_space: staged must be the model_stage_info results")
    try:
        total = sum(int(_result(item, "each staged result", "preflight_space").get("total_bytes") or 0)
                    for item in staged)
        return preflight.space(int(str(free_bytes).strip() or 0), total, min_free_gb, where, host)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("preflight_space: %s" % exc)


def preflight_roce(operstate, addresses, port_state, ifname, address, hca, port, host):
    """{ok, msg} of the RoCE link from its operstate slurp, the `ip addr` result and the RDMA port's state slurp."""
    return preflight.roce(_slurped(operstate, "preflight_roce"),
                          _result(addresses, "the addresses", "preflight_roce").get("stdout", ""),
                          _slurped(port_state, "preflight_roce"), ifname, address, hca, port, host)


class FilterModule(object):
    def filters(self):
        return {"preflight_driver": preflight_driver, "preflight_space": preflight_space,
                "preflight_roce": preflight_roce}
