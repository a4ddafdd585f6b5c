# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that read a staged checkpoint directory."""

    DOCUMENTATION = r"""
options:
  path:
    description: The checkpoint directory.
    type: path
    required: true
  shard_pattern:
    description: Glob that names a shard in the top directory.
    type: str
    default: "*.safetensors"
"""
