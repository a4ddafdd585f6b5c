# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""vllm_patch_report: the vllm_patch role's read-only report from what its
status task reads (the logic: plugins/module_utils/status_reports.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import status_reports


def vllm_patch_report(status):
    """{ok, path, problems} from a check-mode laguna_dflash_patch result."""
    if not isinstance(status, Mapping):
        raise AnsibleFilterError("vllm_patch_report: the input must be a laguna_dflash_patch result")
    return status_reports.vllm_patch(dict(status))


class FilterModule(object):
    def filters(self):
        return {"vllm_patch_report": vllm_patch_report}
