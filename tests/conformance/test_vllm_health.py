"""What the hang check and the smoke test rely on in vLLM 0.25.1, read from its code.

A wedged engine (a collective that never returns) is not a dead one: vLLM's
/health asks AsyncLLM.check_health(), which only looks at the engine's dead
flag, so /health (and /v1/models, served from the API process) keep
answering. Only a generation shows the wedge, and vllm_health.smoke() tells
it from a busy server by vLLM's generated-token counter (its name:
test_vllm_metrics.py). The stand-in's /health answers as vLLM's does (503
only once the engine is dead), and its wedge (LAGUNA_STANDIN_WEDGE_FILE)
leaves /health and /v1/models answering
(tests/integration/test_vllm_serve_verify.py).
"""

import ast

from _conformance import function, source_tree


def _awaits(node):
    return [ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Await)]


def test_vllms_health_only_asks_whether_the_engine_is_dead(vllm_src):
    route = function(source_tree(vllm_src, "entrypoints/serve/instrumentator/health.py"), "health")
    assert _awaits(route) == ["await client.check_health()"], ast.unparse(route)
    handlers = [h for n in ast.walk(route) if isinstance(n, ast.Try) for h in n.handlers]
    assert [ast.unparse(h.type) for h in handlers] == ["EngineDeadError"]
    check = function(source_tree(vllm_src, "v1/engine/async_llm.py"), "check_health")
    # No request to the engine core: nothing a wedged step would hold up.
    assert _awaits(check) == [], ast.unparse(check)
    assert [ast.unparse(n.test) for n in ast.walk(check) if isinstance(n, ast.If)] == ["self.errored"]
