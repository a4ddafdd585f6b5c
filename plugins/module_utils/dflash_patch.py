# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The get_cache_scale guard for vLLM's laguna_dflash.py.

``DFlashLagunaModel.load_weights`` asks the draft's quant config for
KV-cache scales::

    if self.quant_config is not None and (
        scale_name := self.quant_config.get_cache_scale(name)
    ):

A W4A16 draft's quant config has no ``get_cache_scale`` and loading dies with
AttributeError. The fix inserts one guard into that condition::

    if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (

The edit is confined to the method (found with ``ast``), and the result must
still parse, so a drifted vLLM fails loudly instead of being mangled.
"""

from __future__ import annotations

import ast
import re

GUARD = 'hasattr(self.quant_config, "get_cache_scale")'

# The walrus group that calls get_cache_scale, starting at its "(".
_CALL = re.compile(
    r"\((?P<ws>\s*)scale_name\s*:=\s*self\.quant_config\.get_cache_scale\("
)
# A condition already guarded, in any quoting or spacing.
_GUARDED = re.compile(
    r"hasattr\(\s*self\.quant_config\s*,\s*['\"]get_cache_scale['\"]\s*\)"
)


class PatchError(Exception):
    """The file is not the code this patch was written for."""


def method_span(source, class_name, method_name):
    """(first, last) 0-based line numbers of ``class_name.method_name``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise PatchError("the file does not parse as Python: %s" % exc)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and item.name == method_name:
                    first = min([item.lineno] + [d.lineno for d in item.decorator_list])
                    return first - 1, item.end_lineno - 1
            raise PatchError("class %s has no method %s" % (class_name, method_name))
    raise PatchError("no class %s in the file" % class_name)


def patch_source(source, class_name="DFlashLagunaModel", method_name="load_weights"):
    """Return ``(new_source, state)``; state is "patched" or "already_patched".

    Raises PatchError when neither the unguarded code nor the guard is in
    the method.
    """
    lines = source.splitlines(keepends=True)
    first, last = method_span(source, class_name, method_name)
    body = "".join(lines[first:last + 1])

    if _GUARDED.search(body):
        return source, "already_patched"

    matches = list(_CALL.finditer(body))
    if not matches:
        raise PatchError(
            "%s.%s has no `(scale_name := self.quant_config.get_cache_scale(...))` "
            "condition and no %s guard: this vLLM's laguna_dflash.py differs from "
            "the one the patch was written for (version drift)"
            % (class_name, method_name, GUARD)
        )

    patched = body
    for match in reversed(matches):
        patched = patched[:match.start()] + GUARD + " and " + patched[match.start():]
    new_source = "".join(lines[:first]) + patched + "".join(lines[last + 1:])
    try:
        ast.parse(new_source)
    except SyntaxError as exc:
        raise PatchError("the patched file would not parse (%s); left unchanged" % exc)
    return new_source, "patched"
