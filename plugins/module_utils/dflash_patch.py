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

Everything is decided on the parsed code (``ast``), never on text: a call
``self.quant_config.get_cache_scale(...)`` in the method is guarded when a
``hasattr(self.quant_config, "get_cache_scale")`` is evaluated before it and
short-circuits it: an earlier operand of an ``and`` that holds the call, or
the test of an ``if`` (or a conditional expression) whose body holds it. The
guard's text in a comment, a string, a docstring or another function counts
for nothing. The file is "already patched" when every such call in the
method is guarded; otherwise the guard is inserted into each unguarded
call's condition, and the result must parse and have every call guarded, so
a drifted vLLM fails loudly instead of being mangled.
"""

from __future__ import annotations

import ast
import io
import tokenize

GUARD = 'hasattr(self.quant_config, "get_cache_scale")'

_DRIFT = ("this vLLM's laguna_dflash.py differs from the one the patch was "
          "written for (version drift)")


class PatchError(Exception):
    """The file is not the code this patch was written for."""


def _parse(source, what="the file"):
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise PatchError("%s does not parse as Python: %s" % (what, exc))


def find_method(tree, class_name, method_name):
    """The FunctionDef of ``class_name.method_name`` in a parsed module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and item.name == method_name:
                    return item
            raise PatchError("class %s has no method %s" % (class_name, method_name))
    raise PatchError("no class %s in the file" % class_name)


def method_span(source, class_name, method_name):
    """(first, last) 0-based line numbers of ``class_name.method_name``."""
    item = find_method(_parse(source), class_name, method_name)
    first = min([item.lineno] + [d.lineno for d in item.decorator_list])
    return first - 1, item.end_lineno - 1


def _is_quant_config(node):
    """``self.quant_config``."""
    return (isinstance(node, ast.Attribute) and node.attr == "quant_config"
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def is_cache_scale_call(node):
    """``self.quant_config.get_cache_scale(...)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get_cache_scale" and _is_quant_config(node.func.value))


def is_guard(node):
    """``hasattr(self.quant_config, "get_cache_scale")`` (any quoting or spacing)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "hasattr" and len(node.args) == 2 and not node.keywords
            and _is_quant_config(node.args[0])
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "get_cache_scale")


def _conjuncts(node):
    """The operands of a (nested) ``and``; the node itself otherwise."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        out = []
        for value in node.values:
            out.extend(_conjuncts(value))
        return out
    return [node]


def _holds_guard(node):
    return any(is_guard(c) for c in _conjuncts(node))


def _walk_with_parents(method):
    """(node, parents) for every node of the method's own code.

    Nested functions, lambdas and classes are other code: their calls run
    elsewhere, and their conditions guard nothing here.
    """
    stack = [(child, (method,)) for child in ast.iter_child_nodes(method)]
    while stack:
        node, parents = stack.pop()
        yield node, parents
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend((child, parents + (node,)) for child in ast.iter_child_nodes(node))


def is_guarded(call, parents):
    """Is a guard evaluated before ``call`` that keeps it from running without one?"""
    chain = parents + (call,)
    for parent, child in zip(chain, chain[1:]):
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            index = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_holds_guard(v) for v in parent.values[:index]):
                return True
        elif isinstance(parent, (ast.If, ast.While)):
            if any(stmt is child for stmt in parent.body) and _holds_guard(parent.test):
                return True
        elif isinstance(parent, ast.IfExp):
            if parent.body is child and _holds_guard(parent.test):
                return True
    return False


def cache_scale_calls(tree, class_name="DFlashLagunaModel", method_name="load_weights"):
    """[(call, parents, guarded)] for each get_cache_scale call in the method, in source order."""
    method = find_method(tree, class_name, method_name)
    calls = [(node, parents, is_guarded(node, parents))
             for node, parents in _walk_with_parents(method) if is_cache_scale_call(node)]
    return sorted(calls, key=lambda c: (c[0].lineno, c[0].col_offset))


class _Offsets:
    """Character offsets into the source from ast (UTF-8 byte columns) and tokenize positions."""

    def __init__(self, source):
        # Lines as ast and tokenize count them: split at "\n" only (str.splitlines
        # would also split at a form feed or a U+2028 inside a line).
        self.lines = io.StringIO(source).readlines()
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def of_ast(self, lineno, byte_col):
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:byte_col].decode("utf-8"))

    def of_token(self, pos):
        return self.starts[pos[0] - 1] + pos[1]


def _insertion(call, parents, offsets, tokens, where):
    """(offset, text, closing) that guard ``call``; closing is None or a second (offset, text).

    Raises PatchError for a shape this patch does not know.
    """
    # The operand that carries the call: the call itself or `name := call`.
    operand, rest = call, list(parents)
    if rest and isinstance(rest[-1], ast.NamedExpr) and rest[-1].value is call:
        operand = rest.pop()
    holder = rest[-1] if rest else None
    start = offsets.of_ast(operand.lineno, operand.col_offset)
    if isinstance(holder, ast.BoolOp) and isinstance(holder.op, ast.And) \
            and holder.values[0] is not operand:
        # `a and (scale_name := ...)`: right after the `and` before the operand
        # (the recipe's edit; a parenthesis or comment in between stays as it is).
        index = next(i for i, v in enumerate(holder.values) if v is operand)
        previous = holder.values[index - 1]
        after_previous = offsets.of_ast(previous.end_lineno, previous.end_col_offset)
        ands = [t for t in tokens if t.type == tokenize.NAME and t.string == "and"
                and after_previous <= offsets.of_token(t.start) < start]
        if len(ands) != 1:
            raise PatchError("%s: cannot find the `and` before the get_cache_scale call at line %d: %s"
                             % (where, call.lineno, _DRIFT))
        return offsets.of_token(ands[0].end), " " + GUARD + " and", None
    if isinstance(holder, (ast.If, ast.While, ast.IfExp)) and holder.test is operand:
        # `if (scale_name := ...):` or `if scale_name := ...:`: the whole test.
        end = offsets.of_ast(operand.end_lineno, operand.end_col_offset)
        return start, GUARD + " and (", (end, ")")
    raise PatchError(
        "%s: the get_cache_scale call at line %d is neither an operand of an `and` nor the test of an `if`: %s"
        % (where, call.lineno, _DRIFT))


def patch_source(source, class_name="DFlashLagunaModel", method_name="load_weights"):
    """Return ``(new_source, state)``; state is "patched" or "already_patched".

    Raises PatchError when the method has no get_cache_scale call of a shape
    this patch knows (version drift), or when the result would not parse or
    would leave a call unguarded.
    """
    tree = _parse(source)
    calls = cache_scale_calls(tree, class_name, method_name)
    if not calls:
        raise PatchError(
            "%s.%s has no `self.quant_config.get_cache_scale(...)` call to guard with %s: %s"
            % (class_name, method_name, GUARD, _DRIFT))
    unguarded = [(call, parents) for call, parents, guarded in calls if not guarded]
    if not unguarded:
        return source, "already_patched"

    offsets = _Offsets(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits = []
    for call, parents in unguarded:
        offset, text, closing = _insertion(call, parents, offsets, tokens, "%s.%s" % (class_name, method_name))
        edits.append((offset, text))
        if closing:
            edits.append(closing)
    new_source = source
    for offset, text in sorted(edits, key=lambda e: e[0], reverse=True):
        new_source = new_source[:offset] + text + new_source[offset:]

    new_tree = _parse(new_source, "the patched file")
    after = cache_scale_calls(new_tree, class_name, method_name)
    if len(after) != len(calls) or not all(guarded for _call, _parents, guarded in after):
        raise PatchError("%s.%s would still call get_cache_scale unguarded once patched; left unchanged: %s"
                         % (class_name, method_name, _DRIFT))
    return new_source, "patched"
