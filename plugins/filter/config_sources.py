# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""config_sources: the argument specs and the variable names that the laguna
role's validation reads from the collection's files (the logic:
config_check.sources() in plugins/module_utils/config_check.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import from_yaml
from ansible_collections.laguna.spark.plugins.module_utils import config_check


def config_sources(texts):
    """{specs, spec_names, known} of the collection's files, given as {path: text}."""
    if not isinstance(texts, Mapping):
        raise AnsibleFilterError("config_sources: the input must map each file's path to its text")
    try:
        return config_check.sources(dict((str(path), text) for path, text in texts.items()), from_yaml)
    except Exception as exc:  # a spec file that does not parse, or has no argument_specs
        raise AnsibleFilterError("config_sources: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"config_sources": config_sources}
