# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that compare a venv with pins (venv_pins_info, and the venv role's probe venv_probe)."""

    DOCUMENTATION = r"""
options:
  venv:
    description: The venv's directory.
    type: path
    required: true
  pins:
    description: Requirements, e.g. C(vllm==0.25.1), C(torch==2.11.0+cu130), C(ninja).
    type: list
    elements: str
    required: true
  index_url:
    description: pip's C(--index-url).
    type: str
  extra_index_urls:
    description: pip's C(--extra-index-url)s.
    type: list
    elements: str
    default: []
  pip_args:
    description: Further pip install arguments.
    type: list
    elements: str
    default: []
"""
