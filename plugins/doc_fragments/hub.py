# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that ask the Hugging Face Hub, as hf does."""

    DOCUMENTATION = r"""
options:
  endpoint:
    description: The Hub. Defaults to E(HF_ENDPOINT), else U(https://huggingface.co).
    type: str
  token:
    description: Access token. Defaults to E(HF_TOKEN).
    type: str
  timeout:
    description: Seconds per request.
    type: int
    default: 30
"""

    # Modules that verify a checkpoint through the node's digest record.
    DIGESTS = r"""
options:
  full:
    description: Ignore the record and hash every file again.
    type: bool
    default: false
"""
