"""Read the recipe (../shared/recipe/...) and run its shell blocks with stubs.

The recipe is the collection's specification. Instead of copying its values
into the tests, this module takes the code blocks out of the recipe text and
runs the shell ones in bash, in order, as a user would paste them into one
terminal. Every program that would touch a machine (ssh, systemd-run, hf,
rsync, curl, loginctl, pkill, python3, free, sleep) is a stub that records its
argv, the host it runs on, and the environment the block exported. `ssh HOST
CMD` runs CMD through bash as the remote shell would, on a fake sysfs tree of
that host, so the recipe's own gid() function resolves the GID index.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.environ.get(
    "LAGUNA_RECIPE",
    os.path.join(os.path.dirname(ROOT), "shared", "recipe", "laguna-s-2.1-fp8-two-sparks.txt"))
STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipe_stub.py")
STUBBED = ("ssh", "systemd-run", "hf", "rsync", "curl", "loginctl", "pkill", "python3",
           "free", "sleep")
_LANG_TAG = re.compile(r"(bash|python)$")
_SHELL_STARTS = ("curl", "#", "ssh", "for", "export", "hf", "rsync", "python3", "pkill", "VENV=")


def read_recipe(path=RECIPE):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def code_blocks(text):
    """[(lang, code)] of the recipe's code blocks.

    In the published text a code block is a run of non-empty lines (blank
    lines inside an indented block keep their indentation) whose last line
    ends with the block's language tag ("...donebash", "...):python"). A block
    at the margin has truly empty lines inside: there, the runs before the
    tagged one that start like shell code belong to it.
    """
    runs, run = [], []
    for line in text.splitlines() + [""]:
        if line != "":
            run.append(line)
        elif run:
            runs.append(run)
            run = []
    blocks = []
    for i, run in enumerate(runs):
        match = _LANG_TAG.search(run[-1])
        if not match:
            continue
        body = run[:-1] + [run[-1][:match.start()]]
        indent = min(len(x) - len(x.lstrip(" ")) for x in body if x.strip())
        j = i
        while indent == 0 and j > 0 and runs[j - 1][0].split(" ", 1)[0] in _SHELL_STARTS:
            j -= 1
            body = runs[j] + [""] + body
        blocks.append((match.group(1), "\n".join(x[indent:] for x in body)))
    return blocks


def shell_blocks(text):
    return [code for lang, code in code_blocks(text) if lang == "bash"]


def _write_stubs(bindir, python):
    os.makedirs(bindir, exist_ok=True)
    for name in STUBBED:
        path = os.path.join(bindir, name)
        with open(path, "w") as fh:
            fh.write('#!/bin/sh\nexec %s %s %s "$@"\n' % (
                shlex.quote(python), shlex.quote(STUB), shlex.quote(name)))
        os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def run_recipe(workdir, home, user, sysfs_by_host, text=None, python=sys.executable):
    """Run every shell block of the recipe; return (calls, transcript).

    sysfs_by_host: {address: path of a fake /sys/class/infiniband} used by
    commands run through the ssh stub on that host.
    """
    text = read_recipe() if text is None else text
    bindir = os.path.join(workdir, "bin")
    log = os.path.join(workdir, "calls.jsonl")
    _write_stubs(bindir, python)
    script = os.path.join(workdir, "recipe.sh")
    with open(script, "w") as fh:
        fh.write("\n\n".join(shell_blocks(text)) + "\n")
    base_env = {
        "PATH": bindir + os.pathsep + "/usr/bin:/bin",
        "HOME": home, "USER": user, "LANG": "C.UTF-8",
        "RECIPE_STUB_LOG": log,
        "RECIPE_STUB_SYSFS": json.dumps(sysfs_by_host),
    }
    base_env["RECIPE_STUB_BASE_ENV"] = json.dumps(sorted(base_env))
    proc = subprocess.run(["bash", script], env=base_env, cwd=workdir, capture_output=True,
                          text=True, timeout=120, check=False)
    calls = []
    if os.path.exists(log):
        with open(log) as fh:
            calls = [json.loads(line) for line in fh if line.strip()]
    return calls, proc.stdout + proc.stderr


def expected_answers(text=None):
    """The answers the recipe's smoke test expects (its `# -> "Paris"` comments)."""
    text = read_recipe() if text is None else text
    return re.findall(r'#\s*->\s*"([^"]+)"', "\n".join(shell_blocks(text)))


def split_flags(tokens, short_with_value=""):
    """(positionals, {flag: value}) of a command's arguments.

    `--x=y` and `--x y` give y; a flag followed by another flag (or nothing)
    is a switch and gives True. A short option takes a value only when it is
    in short_with_value (e.g. "eco"). Repeated flags keep a list.
    """
    positionals, flags = [], {}

    def put(key, value):
        if key in flags:
            old = flags[key] if isinstance(flags[key], list) else [flags[key]]
            flags[key] = old + [value]
        else:
            flags[key] = value

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and len(tok) > 2:
            key, eq, value = tok.partition("=")
            if eq:
                put(key, value)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                put(key, tokens[i + 1])
                i += 1
            else:
                put(key, True)
        elif tok.startswith("-") and len(tok) == 2:
            if tok[1] in short_with_value and i + 1 < len(tokens):
                put(tok, tokens[i + 1])
                i += 1
            else:
                put(tok, True)
        else:
            positionals.append(tok)
        i += 1
    return positionals, flags


def parse_systemd_run(argv):
    """systemd-run argv -> (its options, environment, properties, command)."""
    options, env, props = {}, {}, {}
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-"):
            break
        if tok in ("-p", "--property") or tok in ("-E", "--setenv"):
            value = argv[i + 1]
            i += 2
            (props if tok in ("-p", "--property") else env).update([value.split("=", 1)])
            continue
        key, eq, value = tok.partition("=")
        if key in ("--property",):
            props.update([value.split("=", 1)])
        elif key in ("--setenv",):
            env.update([value.split("=", 1)])
        else:
            options[key] = value if eq else True
        i += 1
    return options, env, props, argv[i:]
