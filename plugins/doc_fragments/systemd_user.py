# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Modules that drive the calling user's systemd manager (C(systemctl --user))."""

    DOCUMENTATION = r"""
options:
  runtime_dir:
    description: The user's C(XDG_RUNTIME_DIR). Defaults to C(/run/user/<uid>).
    type: path
attributes:
  platform:
    support: full
    platforms: posix
    description: Needs systemd with a user manager (lingering or a login session).
"""
