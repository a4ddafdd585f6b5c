"""Run inside the conformance venv: parse rendered `ray start` argvs with Ray 2.60's own CLI.

stdin: JSON {"cases": {name: [argv...]}} with argv[0] being .../bin/ray.
stdout (last line): JSON {"ray_version": ..., "cases": {name: {"params": {...}} or {"error": ...}}}

Each argv goes through ray.scripts.scripts' click group (`ray`) and its `start`
command's make_context, which parses and type-converts every option exactly as
`ray start` does, without starting anything.
"""

import os

import _probe


def report(request):
    import click
    import ray
    from ray.scripts import scripts

    result = {"ray_version": ray.__version__, "cases": {}}
    for name, argv in request["cases"].items():
        case = {}
        try:
            if os.path.basename(argv[0]) != "ray" or argv[1] != "start":
                raise ValueError("not a `ray start` command: %r" % argv[:2])
            group_ctx = click.Context(scripts.cli, info_name="ray")
            command = scripts.cli.get_command(group_ctx, argv[1])
            ctx = command.make_context("start", list(argv[2:]), parent=group_ctx)
            case["params"] = {k: v for k, v in ctx.params.items() if v not in (None, False, (), "")}
            # click takes no abbreviations, but say which options were spelt out anyway.
            options = {opt for p in command.params for opt in p.opts + p.secondary_opts}
            case["not_exact_flags"] = [a.split("=")[0] for a in argv[2:]
                                       if a.startswith("--") and a.split("=")[0] not in options]
        except click.exceptions.ClickException as exc:
            case["error"] = "%s: %s" % (type(exc).__name__, exc.format_message())
        except Exception as exc:
            case["error"] = "%s: %s" % (type(exc).__name__, exc)
        result["cases"][name] = case
    return result


if __name__ == "__main__":
    _probe.run(report)
