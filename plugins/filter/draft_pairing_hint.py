# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""draft_pairing_hint: the vllm_serve role's sentence on the draft's pairing, from the
dflash_draft_info inspection that ran (its own, or draft_check.yml's when that ran)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def draft_pairing_hint(for_hint, draft=None):
    """The ``pairing_hint`` of ``for_hint``, or of ``draft`` when ``for_hint`` was skipped; "" without one."""
    if not isinstance(for_hint, Mapping):
        raise AnsibleFilterError("draft_pairing_hint: the input must be a dflash_draft_info result (or a skipped one)")
    inspection = draft if for_hint.get("skipped") else for_hint
    if not isinstance(inspection, Mapping):
        raise AnsibleFilterError("draft_pairing_hint: the inspection was skipped and no earlier one was given")
    return inspection.get("pairing_hint", "")


class FilterModule(object):
    def filters(self):
        return {"draft_pairing_hint": draft_pairing_hint}
