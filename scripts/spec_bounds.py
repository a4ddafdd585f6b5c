"""Write each variable's bound into its role's meta/argument_specs.yml.

The range or format config_check enforces lives in one place, the BOUNDS
table of plugins/module_utils/config_check.py; the type, default and
description live in the roles' argument specs (ansible-lint's schema refuses
extra keys there, so a bound cannot be a key of its own). This script makes
the last item of each bounded variable's description the sentence
config_check.doc_sentence() makes from the bound, and removes such a
sentence from a variable without a bound, so `ansible-doc -t role` shows
every range and nobody writes one by hand.

    python3 scripts/spec_bounds.py          rewrite the files that differ
    python3 scripts/spec_bounds.py --check  list them and exit 1, change nothing

tests/unit/test_spec_bounds.py fails while a file differs. Only the lines of
the descriptions concerned change: a one-line description becomes a list,
the sentence is a double-quoted item wrapped below 120 columns.
"""
import argparse
import glob
import json
import os
import re
import sys
import textwrap

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkout  # noqa: E402  pylint: disable=wrong-import-position

ROOT = checkout.ROOT

_OPTIONS = re.compile(r"^    options:(\s+&\S+)?\s*$")  # an entry point's options (maybe anchored)
_OPTION = re.compile(r"^      ([A-Za-z_][A-Za-z0-9_]*):\s*$")
_DESCRIPTION = re.compile(r"^        description:(.*)$")
_WIDTH = 120
_ITEM = " " * 10 + "- "
_MORE = " " * 12


def _indent(line):
    return len(line) - len(line.lstrip(" ")) if line.strip() else None


def _end(lines, start, indent):
    """Index after the block that starts at ``start`` (lines indented deeper than ``indent``)."""
    end = start + 1
    while end < len(lines) and (_indent(lines[end]) is None or _indent(lines[end]) > indent):
        end += 1
    while end > start + 1 and _indent(lines[end - 1]) is None:  # trailing blank lines stay outside
        end -= 1
    return end


def item_lines(text):
    """``text`` as a double-quoted list item of a description, wrapped below _WIDTH."""
    quoted = json.dumps(text, ensure_ascii=False)
    wrapped = textwrap.wrap(quoted, width=_WIDTH - len(_ITEM), break_long_words=False, break_on_hyphens=False)
    return [_ITEM + wrapped[0] + "\n"] + [_MORE + line + "\n" for line in wrapped[1:]]


def _wanted(description, sentence, prefix):
    """A description as it should be: without generated sentences, then ``sentence`` (if any)."""
    items = description if isinstance(description, list) else [description]
    wanted = [item for item in items if not str(item).startswith(prefix)] + ([sentence] if sentence else [])
    return description if wanted == items else wanted


def _description(block, sentence, prefix):
    """New lines of one option's description block (``block[0]`` is the ``description:`` line)."""
    description = yaml.safe_load("".join(line[8:] for line in block))["description"]
    if _wanted(description, sentence, prefix) is description:
        return block
    head = _DESCRIPTION.match(block[0]).group(1).strip()
    if head:  # one scalar: it becomes the list's first item
        if head[0] in "|>":
            raise ValueError("block scalar description: %s" % block[0].strip())
        out = ["        description:\n", _ITEM + head + "\n"]
        out += [_MORE + line.strip() + "\n" if line.strip() else line for line in block[1:]]
    else:  # a list: keep the items that are not generated
        out, items = [block[0]], []
        for line in block[1:]:
            if line.startswith(_ITEM):
                items.append([line])
            elif items and (_indent(line) is None or _indent(line) > 10):
                items[-1].append(line)
            else:
                raise ValueError("unexpected line in a description list: %s" % line.strip())
        for item in items:
            (text,) = yaml.safe_load("".join(line[10:] for line in item))
            if not str(text).startswith(prefix):
                out.extend(item)
    if sentence:
        out += item_lines(sentence)
    return out


def render(text, sentence_for, prefix):
    """``text`` of an argument_specs.yml with every top-level option's bound sentence as ``sentence_for`` says.

    ``sentence_for(name)``: the sentence, or None for a variable without one.
    Raises ValueError when the result would parse to anything but the same
    specs with those descriptions.
    """
    lines = text.splitlines(True)
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not _OPTIONS.match(line):
            continue
        block_end = _end(lines, i - 1, 4)
        while i < block_end:
            match = _OPTION.match(lines[i])
            if not match:
                out.append(lines[i])
                i += 1
                continue
            option_end = _end(lines, i, 6)
            option = lines[i:option_end]
            for j, part in enumerate(option):
                if _DESCRIPTION.match(part):
                    end = _end(option, j, 8)
                    option[j:end] = _description(option[j:end], sentence_for(match.group(1)), prefix)
                    break
            out.extend(option)
            i = option_end
    result = "".join(out)
    _verify(text, result, sentence_for, prefix)
    return result


def _verify(before, after, sentence_for, prefix):
    expected, new = yaml.safe_load(before), yaml.safe_load(after)
    for entry in (expected.get("argument_specs") or {}).values():
        for name, spec in ((entry or {}).get("options") or {}).items():
            if "description" in spec:
                spec["description"] = _wanted(spec["description"], sentence_for(name), prefix)
    if expected != new:
        raise ValueError("the rewritten file does not parse to the same specs with the bounds' sentences")


def spec_files(root=ROOT):
    return sorted(glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="list the files that differ, change nothing")
    args = parser.parse_args(argv)
    cc = checkout.module_utils("config_check")  # it imports only ansible-core
    stale = []
    for path in spec_files():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        new = render(text, cc.doc_sentence, cc.DOC_PREFIX)
        if new == text:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not args.check:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(new)
    for path in stale:
        print(("differs: " if args.check else "rewritten: ") + path)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
