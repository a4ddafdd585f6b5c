# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""mirror_stream_patterns: the command-line patterns of a mirror's rsync
streams, senders and receivers (the logic: mirror.stream_patterns() in
plugins/module_utils/mirror.py, beside the argv the streams run with)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.laguna.spark.plugins.module_utils import mirror


def mirror_stream_patterns(dest):
    """{senders, receivers}: regular expressions for stray_processes."""
    if not isinstance(dest, str) or ":/" not in dest:
        raise AnsibleFilterError("mirror_stream_patterns: the input must be the mirror's user@address:/path, not %r"
                                 % (dest,))
    return mirror.stream_patterns(dest)


class FilterModule(object):
    def filters(self):
        return {"mirror_stream_patterns": mirror_stream_patterns}
