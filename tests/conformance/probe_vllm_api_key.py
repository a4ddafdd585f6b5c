"""vLLM 0.25.1's API key handling, run in the conformance venv (test_vllm_api_key.py).

Reads a JSON request on stdin and prints one JSON report line:
  middleware  - each case {path, method, authorization, tokens} through the
                real AuthenticationMiddleware (vllm/entrypoints/serve/utils/
                server_utils.py) driven as an ASGI app around an app that
                answers 200 "passed": whether the request reached the app,
                the status, the body and the content type;
  guarded     - the real GUARDED_PREFIX;
  option      - how vLLM's own parser declares --api-key (FrontendArgs,
                vllm/entrypoints/openai/cli_args.py): action class, nargs,
                default, and what its type makes of some values, and what
                some command lines parse to;
  selection   - the expression of build_app (vllm/entrypoints/openai/
                api_server.py) that picks the keys, found in its source by
                AST, its text, whether it guards the add_middleware call,
                and its value for each case {api_key, env} (env: the
                VLLM_API_KEY environment variable, null for unset) with the
                real vllm.envs reading the environment.
All of it is vLLM's own code; none of it needs a GPU.
"""

import argparse
import ast
import asyncio
import os

import _probe


def drive(middleware_cls, case):
    """One request through the real middleware; what came back."""
    passed = []

    async def app(scope, receive, send):
        passed.append(True)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"passed"})

    headers = [(b"host", b"127.0.0.1:8000")]
    if case.get("authorization") is not None:
        headers.append((b"authorization", case["authorization"].encode("latin-1")))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": case["method"], "scheme": "http", "path": case["path"],
             "raw_path": case["path"].encode(), "root_path": "", "query_string": b"",
             "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    async def run():
        await middleware_cls(app, tokens=case["tokens"])(scope, receive, send)

    asyncio.run(run())
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    content_type = dict(start.get("headers", [])).get(b"content-type", b"").decode()
    return {"passed": bool(passed), "status": start["status"], "body": body.decode(),
            "content_type": content_type}


def option_declaration():
    from vllm.entrypoints.openai.cli_args import FrontendArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    FrontendArgs.add_cli_args(parser)
    action = parser._option_string_actions["--api-key"]
    parsed = {}
    for name, argv in (("none", []), ("one", ["--api-key", "a"]), ("two", ["--api-key", "a", "b"]),
                       ("repeated", ["--api-key", "a", "--api-key", "b"]), ("equals", ["--api-key=a"]),
                       ("empty", ["--api-key", ""]), ("None", ["--api-key", "None"])):
        parsed[name] = parser.parse_args(argv).api_key
    return {"action": type(action).__name__, "nargs": action.nargs, "default": action.default,
            "option_strings": action.option_strings, "dest": action.dest,
            "type_of": {value: action.type(value) for value in ("", "None", "k", " k ")},
            "parsed": parsed}


def key_selection(cases):
    """The key-picking expression of build_app, evaluated as vLLM evaluates it."""
    from vllm import envs
    from vllm.entrypoints.openai import api_server

    path = api_server.__file__
    source = open(path).read()
    tree = ast.parse(source, path)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.NamedExpr)
                and node.test.target.id == "tokens"):
            found.append(node)
    if len(found) != 1:
        raise RuntimeError("%d `if tokens := ...` statements in %s" % (len(found), path))
    node = found[0]
    guards_middleware = any(
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_middleware"
        and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "AuthenticationMiddleware"
        and any(k.arg == "tokens" and isinstance(k.value, ast.Name) and k.value.id == "tokens"
                for k in call.keywords)
        for stmt in node.body for call in ast.walk(stmt))
    expression = compile(ast.Expression(node.test.value), path, "eval")
    values = []
    for case in cases:
        saved = os.environ.pop("VLLM_API_KEY", None)
        try:
            if case["env"] is not None:
                os.environ["VLLM_API_KEY"] = case["env"]
            values.append(eval(expression, {"envs": envs},  # noqa: S307 (vLLM's own expression)
                               {"args": argparse.Namespace(api_key=case["api_key"])}))
        finally:
            os.environ.pop("VLLM_API_KEY", None)
            if saved is not None:
                os.environ["VLLM_API_KEY"] = saved
    return {"text": ast.unparse(node.test), "line": node.lineno, "guards_middleware": guards_middleware,
            "values": values}


def report(request):
    result = {}
    try:
        import vllm
        from vllm.entrypoints.serve.utils import server_utils

        result["vllm_version"] = vllm.__version__
        result["guarded"] = list(server_utils.GUARDED_PREFIX)
        result["middleware"] = [drive(server_utils.AuthenticationMiddleware, case) for case in request["cases"]]
        result["option"] = option_declaration()
        result["selection"] = key_selection(request["selection_cases"])
    except BaseException as exc:  # the test shows why
        result["error"] = _probe.error(exc)
    return result


if __name__ == "__main__":
    _probe.run(report, _probe.VLLM_QUIET)
