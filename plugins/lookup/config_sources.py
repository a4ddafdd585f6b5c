# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""config_sources: the argument specs and the variable names that the laguna
role's validation reads from the collection's files on the controller (the
logic: config_check.sources() in plugins/module_utils/config_check.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: config_sources
author: laguna-spark developers (!UNKNOWN)
version_added: "0.3.0"
short_description: The argument specs and the variable names of the collection's files
description:
  - What the C(laguna) role's validation passes to M(laguna.spark.config_check), read on the controller from
    the collection's role and playbook files.
  - Walks each directory of O(_terms) recursively and reads every regular file whose name ends in C(.yml),
    C(.yaml) or C(.j2), as M(ansible.builtin.find) with those patterns and C(recurse) finds them (hidden files
    and symbolic links are left out, symbolically linked directories are not entered), each as text with its
    trailing whitespace stripped, as the P(ansible.builtin.file#lookup) lookup reads it; the files of all the
    directories are read in the order of their paths.
  - C(specs) are the files whose path ends in C(/meta/argument_specs.yml) (or C(.yaml)), parsed, in that order;
    C(spec_names) every option of every entry point of those, once each, in order; C(known) every name of the
    form C(word_word) in any of the files, once each, in the order first seen (a defined variable with a
    collection prefix that is none of them is unknown to the collection).
  - A directory that does not exist, a file that cannot be read, and a spec file that does not parse or has no
    C(argument_specs) mapping fail, naming the cause.
options:
  _terms:
    description: The directories to read, on the controller (the roles' and the playbooks' directories).
    type: list
    elements: path
    required: true
notes:
  - Call it with C(lookup) to get the dict itself; C(query) returns it as the only element of a list.
seealso:
  - module: laguna.spark.config_check
"""

EXAMPLES = r"""
- name: Read the variables' specs and every name the collection mentions
  ansible.builtin.set_fact:
    laguna_config_sources: "{{ lookup('laguna.spark.config_sources', role_path ~ '/..', role_path ~ '/../../playbooks') }}"
  run_once: true
  when: laguna_config_sources is not defined

- name: The same, as a list of one dict
  ansible.builtin.debug:
    msg: "{{ (query('laguna.spark.config_sources', playbook_dir ~ '/../roles') | first).spec_names }}"
"""

RETURN = r"""
_raw:
  description: One dict (the only element of the list C(query) returns).
  type: list
  elements: dict
  contains:
    specs:
      description: The parsed C(meta/argument_specs.yml) files, in the order of their paths.
      type: list
      elements: dict
    spec_names:
      description: Every option of every entry point of the C(specs), once each, in order.
      type: list
      elements: str
    known:
      description: Every name of the form C(word_word) in any of the files, once each, in the order first seen.
      type: list
      elements: str
"""

import os
import stat

from ansible.errors import AnsibleLookupError
from ansible.plugins.filter.core import from_yaml
from ansible.plugins.lookup import LookupBase
from ansible_collections.laguna.spark.plugins.module_utils import config_check

# The patterns of the ansible.builtin.find task this lookup replaces: ["*.yml", "*.yaml", "*.j2"].
SUFFIXES = (".yml", ".yaml", ".j2")


def _raise(exc):
    raise exc


def collection_paths(directories):
    """The paths of the files to read under ``directories``, sorted, as ansible.builtin.find names them
    (normalized; regular files only; hidden names skipped, hidden directories still entered)."""
    paths = []
    for directory in directories:
        if not isinstance(directory, str):
            raise AnsibleLookupError("config_sources: each term must be a directory's path, not %r" % (directory,))
        if not os.path.isdir(directory):
            raise AnsibleLookupError("config_sources: %s is not a directory" % directory)
        try:
            for dirpath, _dirs, names in os.walk(directory, onerror=_raise):
                for name in names:
                    if name.startswith(".") or not name.endswith(SUFFIXES):
                        continue
                    path = os.path.normpath(os.path.join(dirpath, name))
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        paths.append(path)
        except OSError as exc:
            raise AnsibleLookupError("config_sources: cannot walk %s: %s" % (directory, exc)) from exc
    return sorted(paths)


def read_text(path):
    """The file's text (UTF-8) without trailing whitespace, as the ansible.builtin.file lookup reads it."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise AnsibleLookupError("config_sources: cannot read %s: %s" % (path, exc)) from exc
    return data.decode("utf-8", errors="surrogateescape").rstrip()


def config_sources(directories):
    """{specs, spec_names, known} of the files under ``directories``."""
    texts = dict((path, read_text(path)) for path in collection_paths(directories))
    try:
        return config_check.sources(texts, from_yaml)
    except ValueError as exc:  # a spec file that does not parse, or has no argument_specs mapping: named
        raise AnsibleLookupError("config_sources: %s" % exc) from exc


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [config_sources(terms)]
