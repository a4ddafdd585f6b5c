# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""linger_report, vllm_patch_report: the read-only reports of the linger and
vllm_patch roles from what their status tasks read (the logic:
plugins/module_utils/status_reports.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import status_reports


def linger_report(show, user):
    """{ok, linger, problems} from the result of `loginctl show-user <user> --property=Linger --value`."""
    if not isinstance(show, Mapping) or "rc" not in show:
        raise AnsibleFilterError("linger_report: the input must be the result of the loginctl command (with rc)")
    return status_reports.linger(show["rc"], show.get("stdout"), show.get("stderr"), user)


def vllm_patch_report(status):
    """{ok, path, problems} from a check-mode laguna_dflash_patch result."""
    if not isinstance(status, Mapping):
        raise AnsibleFilterError("vllm_patch_report: the input must be a laguna_dflash_patch result")
    return status_reports.vllm_patch(dict(status))


class FilterModule(object):
    def filters(self):
        return {"linger_report": linger_report, "vllm_patch_report": vllm_patch_report}
