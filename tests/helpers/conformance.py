"""Item-by-item view of the recipe and of what the collection renders.

Both sides become {item: value} with the same keys, e.g.
  "ray-head env NCCL_IB_GID_INDEX": "3"
  "vllm-serve arg --max-model-len": "262144"
  "vllm-serve speculative-config model": "~/models/hf/Laguna-S-2.1-DFlash-W4A16"
Paths use `~` for the service user's home on both sides. A switch is
"(switch)"; an item one side lacks is absent from its dict.
"""

from __future__ import annotations

import json
import re
import shlex

from helpers import recipe as recipe_mod

SWITCH = "(switch)"
NONE = "—"


def _norm(value, home):
    if value is True:
        return SWITCH
    if isinstance(value, list):
        return " ".join(_norm(v, home) for v in value)
    text = str(value)
    return text.replace(home + "/", "~/") if home else text


def _command_items(prefix, command, home, skip_positionals=1):
    """Items of a program's argv: its path, positionals, flags."""
    items = {prefix + " program": _norm(command[0], home)}
    positionals, flags = recipe_mod.split_flags(command[1 + skip_positionals:])
    for i, pos in enumerate(positionals):
        items["%s positional %d" % (prefix, i)] = _norm(pos, home)
    for key, value in flags.items():
        items["%s %s" % (prefix, key)] = _norm(value, home)
    return items


def _unit_items(prefix, systemd_run_argv, environment, home):
    options, env, props, command = recipe_mod.parse_systemd_run(systemd_run_argv)
    items = {}
    for key, value in options.items():
        if key == "--description":  # free text; what matters is the fingerprint in it
            value = "(text) [cfg <fingerprint>]" if re.search(r"\[cfg [0-9a-f]+\]$", value) else "(text)"
        items["%s systemd-run %s" % (prefix, key)] = _norm(value, home)
    for key, value in dict(env, **(environment or {})).items():
        items["%s env %s" % (prefix, key)] = _norm(value, home)
    for key, value in props.items():
        items["%s property %s" % (prefix, key)] = _norm(value, home)
    return items, command


def _ray_items(prefix, systemd_run_argv, environment, home):
    items, command = _unit_items(prefix, systemd_run_argv, environment, home)
    items.update(_command_items(prefix + " ray", command, home))  # skips `start`
    return items


def _vllm_items(systemd_run_argv, environment, home):
    items, command = _unit_items("vllm-serve", systemd_run_argv, environment, home)
    args = _command_items("vllm-serve arg", command, home)  # skips `serve`
    spec = args.pop("vllm-serve arg --speculative-config", None)
    if spec is not None:
        for key, value in json.loads(spec).items():
            items["vllm-serve speculative-config %s" % key] = _norm(value, home)
    items.update(args)
    return items


def _smoke_items(body, expect, home):
    items = {"smoke request %s" % k: _norm(v, home) for k, v in body.items() if k != "messages"}
    items["smoke request prompt"] = body["messages"][-1]["content"]
    items["smoke expect"] = expect
    return items


# rsync's long spellings of the recipe's short options.
_RSYNC_SHORT = {"--archive": "-a", "--rsh": "-e"}


def _rsync_items(argv):
    items = {}
    flags = recipe_mod.split_flags(argv[1:], short_with_value="e")[1]
    for key, value in flags.items():
        key = _RSYNC_SHORT.get(key, key)
        if key == "-e":
            ssh = shlex.split(value)
            items["rsync ssh program"] = ssh[0]
            ssh_flags = recipe_mod.split_flags(ssh[1:], short_with_value="BbcDEeFIiJLlmOoPpQRSWw")[1]
            for skey, svalue in ssh_flags.items():
                for one in (svalue if isinstance(svalue, list) else [svalue]):
                    if skey == "-o":
                        name, _sep, val = one.partition("=")
                        items["rsync ssh -o %s" % name] = val
                    else:
                        items["rsync ssh %s" % skey] = SWITCH if one is True else one
        elif value is True:  # the source and destination paths are compared as local dirs
            items["rsync %s" % key] = SWITCH
        elif key.startswith("-"):
            items["rsync %s" % key] = value
    return items


def recipe_items(calls, text, home, head_ip, worker_ip):
    """Items of what the recipe runs (calls recorded by recipe.run_recipe)."""
    items = {}
    for call in calls:
        argv, prog, host = call["argv"], call["prog"], call["host"]
        if prog == "systemd-run" and "ray" in " ".join(argv) and " start" in " ".join(argv):
            role = "ray-head" if host == head_ip else "ray-worker" if host == worker_ip else "ray-?"
            items.update(_ray_items(role, argv, {}, home))
        elif prog == "systemd-run" and "serve" in argv:
            items.update(_vllm_items(argv, call["env"], home))
        elif prog == "hf" and argv[1:2] == ["download"]:
            flags = recipe_mod.split_flags(argv[3:])[1]
            items["hf-download %s local-dir" % argv[2]] = _norm(flags.get("--local-dir"), home)
        elif prog == "rsync":
            items.update(_rsync_items(argv))
        elif prog == "pkill":
            items["clean-slate pkill pattern"] = argv[-1]
        elif prog == "curl" and any("capital" in a for a in argv):
            body = json.loads(argv[argv.index("-d") + 1])
            expect = recipe_mod.expected_answers(text)
            items.update(_smoke_items(body, expect[0] if expect else NONE, home))
    return items


def collection_items(rendered, systemd_run_argv, rsync_argv):
    """Items of what the collection renders (tests.helpers.render output).

    systemd_run_argv(name, command, environment, properties) -> argv and
    rsync_argv(options, rsh) -> argv are the collection's own command
    builders (of the systemd_run_service and model_mirror modules).
    """
    hosts = rendered["hosts"]
    head = hosts[rendered["head"]]
    worker = hosts[rendered["workers"][0]]
    home = head["home"]
    items = {}
    for prefix, node in (("ray-head", head), ("ray-worker", worker)):
        ray = node["ray"]
        argv = systemd_run_argv(ray["unit"], ray["argv"], ray["environment"], ray["properties"])
        items.update(_ray_items(prefix, argv, {}, home))
    serve = head["vllm_serve"]
    argv = systemd_run_argv(serve["unit"], serve["argv"], serve["environment"], serve["properties"])
    items.update(_vllm_items(argv, {}, home))
    v = head["vars"]
    for artifact in v["staging_artifacts"]:
        items["hf-download %s local-dir" % artifact["repo"]] = _norm(artifact["path"], home)
    rsh = " ".join(shlex.quote(a) for a in ["ssh", "-c", v["staging_ssh_cipher"]] + list(v["staging_ssh_options"]))
    items.update(_rsync_items(rsync_argv(list(v["staging_rsync_options"]), rsh)))
    items["clean-slate pkill pattern"] = v["preflight_stray_pattern"]
    # The request the collection's smoke test sends (vllm_health.smoke(), for the
    # verification, the hang check and the fast path alike).
    from ansible_collections.laguna.spark.plugins.module_utils import vllm_health  # pylint: disable=import-outside-toplevel
    body = vllm_health.smoke_request(v["vllm_serve_served_model_name"], v["vllm_serve_smoke_prompt"],
                                     v["vllm_serve_smoke_max_tokens"])
    items.update(_smoke_items(body, v["vllm_serve_smoke_expect"] or NONE, home))
    return items


DIFFERENCES_PAGE = "docs/differences-from-the-recipe.md"
DIFFERENCES_HEADER = ["item", "recipe value", "variable", "default", "why"]


def differences_table(page_text):
    """{item: row} of the table of deliberate differences in DIFFERENCES_PAGE,
    or None when the page has no such table (its header row is missing)."""
    lines = page_text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if [c.strip() for c in line.strip().strip("|").split("|")] == DIFFERENCES_HEADER), None)
    if start is None:
        return None
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip().startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        item, recipe_value, variable, default, why = (c.strip("`") for c in cells)
        rows[item] = {"recipe": recipe_value, "variable": variable, "default": default, "why": why}
    return rows


def compare(recipe, collection, table):
    """Problems: items that differ and are not in the table, stale rows."""
    problems = []
    for item in sorted(set(recipe) | set(collection)):
        want, have = recipe.get(item, NONE), collection.get(item, NONE)
        row = table.get(item)
        if want == have:
            if row:
                problems.append("%s: %s lists a difference, but both are %r" % (item, DIFFERENCES_PAGE, want))
            continue
        if not row:
            problems.append("%s: recipe %r, collection %r, and no row in the "
                            "'Differences from the recipe' table of %s" % (item, want, have, DIFFERENCES_PAGE))
            continue
        if row["recipe"] != want:
            problems.append("%s: %s says the recipe has %r, it has %r"
                            % (item, DIFFERENCES_PAGE, row["recipe"], want))
        if row["default"] != have:
            problems.append("%s: %s says the default is %r, the collection renders %r"
                            % (item, DIFFERENCES_PAGE, row["default"], have))
        if len(row["why"]) < 15:
            problems.append("%s: the row in %s does not say why" % (item, DIFFERENCES_PAGE))
    return problems
