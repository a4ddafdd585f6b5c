# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Attributes that several modules of the collection state in the same words.

    A module names the variants it shares, for example
    ``extends_documentation_fragment: [laguna.spark.attributes.no_diff]``,
    and keeps in its own ``attributes`` only what it says in its own words
    (what its check mode predicts, a platform requirement of its own).
    Every variant is one attribute, complete (support and description), so a
    module takes an attribute either whole from here or whole from itself.
    """

    # The base adds nothing: modules name the variants below.
    DOCUMENTATION = r"""
options: {}
"""

    # Modules that change nothing a diff could show, or only report.
    NO_DIFF = r"""
options: {}
attributes:
  diff_mode:
    support: none
    description: Reports no diff.
"""

    # Modules that run on the Spark nodes themselves.
    DGX_SPARK = r"""
options: {}
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux (DGX Spark, Ubuntu 24.04).
"""

    # Modules that are action plugins run on the controller alone.
    CONTROLLER = r"""
options: {}
attributes:
  action:
    support: full
    description: Runs on the controller; nothing is sent to the node.
  platform:
    support: full
    platforms: all
    description: Any host; it runs on the controller.
"""

    # Modules that only read the host they run on.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads; the same result in check mode.
"""

    # Modules whose only input is sysfs.
    READS_SYSFS = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads sysfs; the same result in check mode.
"""
