"""The stand-in vLLM's API key against vLLM 0.25.1's own code.

probe_vllm_api_key.py (run in the conformance venv) drives the real
AuthenticationMiddleware as an ASGI app over a table of requests (paths,
methods, Authorization headers, one or two configured keys), reads how vLLM's
parser declares --api-key, and evaluates the expression of build_app that
picks the keys (`args.api_key or [envs.VLLM_API_KEY]`, found in
api_server.py's source) for --api-key and VLLM_API_KEY combinations. The
stand-in (tests/doubles/vllm_standin/vllm/entrypoints/cli.py) must decide
every request as the middleware does (authorized()), answer the same 401,
declare --api-key the same way and pick the same keys (api_key_tokens()),
and its HTTP server must apply that decision to real requests.
"""

import argparse
import json
import urllib.error
import urllib.request

import pytest

from _conformance import run_in_venv
from helpers import standin
from helpers.constants import SERVED_MODEL
from helpers.servers import Servers

RIGHT, SECOND, WRONG = "sk-laguna-right", "sk-laguna-second", "sk-laguna-wrong"
PATHS = ["/v1/models", "/v1/chat/completions", "/v2/x", "/inference/x", "/health", "/metrics",
         "/tokenize", "/version",
         # the prefix is a string prefix, not a path segment; and it is case-sensitive
         "/v1x", "/V1/models", "/", "/v"]
METHODS = ["GET", "POST", "OPTIONS"]
HEADERS = [None, "", "Bearer " + RIGHT, "bearer " + RIGHT, "BEARER " + RIGHT, "Bearer " + WRONG,
           "Basic " + RIGHT, "Bearer", "Bearer  " + RIGHT, "Bearer " + SECOND, RIGHT]
TOKEN_SETS = [[RIGHT], [RIGHT, SECOND]]
CASES = [{"path": p, "method": m, "authorization": h, "tokens": t}
         for t in TOKEN_SETS for p in PATHS for m in METHODS for h in HEADERS]
# --api-key (None: absent) x VLLM_API_KEY (None: unset)
SELECTION_CASES = [{"api_key": k, "env": e}
                   for k in (None, [], ["a"], ["a", "b"], [None], [None, "a"], ["", "b"])
                   for e in (None, "", "e")]
PARSED = {"none": [], "one": ["--api-key", "a"], "two": ["--api-key", "a", "b"],
          "repeated": ["--api-key", "a", "--api-key", "b"], "equals": ["--api-key=a"],
          "empty": ["--api-key", ""], "None": ["--api-key", "None"]}


@pytest.fixture(scope="module")
def real(vllm_python):
    report = run_in_venv(vllm_python, "probe_vllm_api_key.py",
                         {"cases": CASES, "selection_cases": SELECTION_CASES}, timeout=300)
    assert "error" not in report, report["error"]
    assert report["vllm_version"] == "0.25.1"
    assert len(report["middleware"]) == len(CASES)
    return report


@pytest.fixture(scope="module")
def cli():
    return standin.modules("vllm.entrypoints.cli")[0]


def _label(case):
    return "%s %s %r keys=%d" % (case["method"], case["path"], case["authorization"], len(case["tokens"]))


def test_the_guarded_prefixes_are_vllms(real, cli):
    assert tuple(real["guarded"]) == cli.GUARDED_PREFIX == ("/v1", "/v2", "/inference")


def test_the_table_covers_both_answers(real):
    """The cases reach both sides of the middleware, so the comparison below means something."""
    passed = [r["passed"] for r in real["middleware"]]
    assert passed.count(True) > 50 and passed.count(False) > 50
    by_case = {(c["path"], c["method"], c["authorization"], len(c["tokens"])): r
               for c, r in zip(CASES, real["middleware"])}
    assert not by_case[("/v1/models", "GET", None, 1)]["passed"]
    assert by_case[("/v1/models", "GET", "bearer " + RIGHT, 1)]["passed"]
    assert by_case[("/health", "GET", None, 1)]["passed"]
    assert by_case[("/v2/x", "OPTIONS", None, 1)]["passed"]
    assert by_case[("/v1/models", "GET", "Bearer " + SECOND, 2)]["passed"]
    assert not by_case[("/v1/models", "GET", "Bearer " + SECOND, 1)]["passed"]


def test_the_standin_decides_every_request_as_vllms_middleware(real, cli):
    wrong = []
    for case, answer in zip(CASES, real["middleware"]):
        ours = cli.authorized(case["path"], case["method"], case["authorization"], case["tokens"])
        if ours != answer["passed"]:
            wrong.append("%s: vLLM %s, stand-in %s" % (_label(case), answer["passed"], ours))
    assert not wrong, "\n".join(wrong)


def test_the_refusal_is_vllms(real, cli):
    refused = [r for r in real["middleware"] if not r["passed"]]
    assert {(r["status"], r["body"], r["content_type"]) for r in refused} == {
        (cli.UNAUTHORIZED[0], cli.UNAUTHORIZED[1], "application/json")}
    assert json.loads(cli.UNAUTHORIZED[1]) == {"error": "Unauthorized"}


def test_without_keys_the_standin_lets_everything_in(real, cli):
    """vLLM adds the middleware only when the picked keys are not empty (checked below)."""
    assert real["selection"]["guards_middleware"]
    for path in PATHS:
        assert cli.authorized(path, "POST", None, [])


def test_the_keys_come_from_api_key_else_vllm_api_key(real, cli):
    selection = real["selection"]
    # The precedence as vLLM's source writes it (found by AST in api_server.py).
    assert selection["text"] == "(tokens := [key for key in args.api_key or [envs.VLLM_API_KEY] if key])"
    wrong = []
    for case, value in zip(SELECTION_CASES, selection["values"]):
        environ = {} if case["env"] is None else {"VLLM_API_KEY": case["env"]}
        ours = cli.api_key_tokens(case["api_key"], environ)
        if ours != value:
            wrong.append("--api-key %r, VLLM_API_KEY %r: vLLM %r, stand-in %r" % (
                case["api_key"], case["env"], value, ours))
    assert not wrong, "\n".join(wrong)
    values = dict(((repr(c["api_key"]), c["env"]), v) for c, v in zip(SELECTION_CASES, selection["values"]))
    assert values[("None", "e")] == ["e"] and values[("['a']", "e")] == ["a"]  # the flag wins
    assert values[("[None]", "e")] == []  # `--api-key ""` turns the key off, VLLM_API_KEY too


def test_the_standin_declares_api_key_like_vllm(real, cli):
    option = real["option"]
    serve = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    ours = serve._option_string_actions["--api-key"]
    assert (type(ours).__name__, ours.nargs, ours.default, ours.option_strings, ours.dest) == (
        option["action"], option["nargs"], option["default"], option["option_strings"], option["dest"])
    assert option["nargs"] == "+"
    assert {value: ours.type(value) for value in option["type_of"]} == option["type_of"]
    for name, argv in PARSED.items():
        assert cli.parser().parse_args(["serve", "/m"] + argv).api_key == option["parsed"][name], name


@pytest.fixture(scope="module")
def standin_servers(cli):
    """{number of keys: base URL} of in-process stand-ins serving with those keys."""
    with Servers() as servers:
        yield {len(tokens): servers.start(cli.handler_for(standin.engine(SERVED_MODEL, 0, 4096), tokens))
               for tokens in TOKEN_SETS}


def _request(url, method, authorization):
    body = json.dumps({"model": SERVED_MODEL, "messages": [{"role": "user", "content": "hi"}],
                       "prompt": "hi", "max_tokens": 1}).encode() if method == "POST" else None
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_standin_server_answers_as_vllm(real, standin_servers):
    """The HTTP server applies the decision: a refusal is vLLM's 401, byte for byte; the rest get through."""
    wrong = []
    for case, answer in zip(CASES, real["middleware"]):
        if case["method"] == "OPTIONS":  # the stand-in has no OPTIONS handler
            continue
        status, body = _request(standin_servers[len(case["tokens"])] + case["path"], case["method"],
                                case["authorization"])
        if answer["passed"] and status == 401:
            wrong.append("%s: vLLM lets it through, the stand-in answered 401 %s" % (_label(case), body))
        elif not answer["passed"] and (status, body) != (answer["status"], answer["body"]):
            wrong.append("%s: vLLM %s %s, stand-in %s %s" % (_label(case), answer["status"], answer["body"],
                                                             status, body))
    assert not wrong, "\n".join(wrong)


def test_the_standin_serves_with_the_key_it_was_given(cli, tmp_path, monkeypatch):
    """`vllm serve --api-key` and VLLM_API_KEY reach the server that serve() builds."""
    seen = []

    class Stop(Exception):
        pass

    def handler_for(engine, api_tokens=(), terminate_if_errored=None):
        seen.append(list(api_tokens))
        raise Stop()

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(cli, "handler_for", handler_for)
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    for argv, want in (([], ["from-env"]), (["--api-key", "a", "b"], ["a", "b"]), (["--api-key", ""], [])):
        with pytest.raises(Stop):
            # the collection's memory share: vLLM's default 0.92 fails the stand-in GPU's check
            cli.serve(cli.parser().parse_args(["serve", str(model), "--gpu-memory-utilization", "0.85"] + argv))
        assert seen[-1] == want, argv
