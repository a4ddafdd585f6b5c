# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""draft_quant_rebuild: whether the draft_quant role rebuilds the W4A16 draft
(the logic: rebuild_reasons() in plugins/module_utils/dflash_quant.py)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import dflash_quant


def draft_quant_rebuild(report, card, source_repo, force=False):
    """{needed, reasons} from the existing draft's dflash_draft_info result and its model card's slurp."""
    if not isinstance(report, Mapping):
        raise AnsibleFilterError("draft_quant_rebuild: the input must be a dflash_draft_info result")
    if card is not None and not isinstance(card, Mapping):
        raise AnsibleFilterError("draft_quant_rebuild: card must be the slurp result of the model card")
    try:
        text = base64.b64decode((card or {}).get("content") or "").decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise AnsibleFilterError("draft_quant_rebuild: the model card's content is not base64: %s" % exc)
    reasons = dflash_quant.rebuild_reasons(dict(report), text, source_repo, force)
    return {"needed": bool(reasons), "reasons": reasons}


class FilterModule(object):
    def filters(self):
        return {"draft_quant_rebuild": draft_quant_rebuild}
