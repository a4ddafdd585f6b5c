# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The one way the collection's modules build their AnsibleModule.

Every module of the collection supports check mode (each states in its
``attributes`` what check mode does), so that is said here once; a module
passes its options (its argument spec, documented in its DOCUMENTATION) and
any constraints between them (``required_if``, ``mutually_exclusive``, ...).
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def new_module(options, **constraints):
    """AnsibleModule(argument_spec=options, supports_check_mode=True, **constraints)."""
    return AnsibleModule(argument_spec=options, supports_check_mode=True, **constraints)
