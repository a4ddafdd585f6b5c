"""Helpers shared by the unit and integration tests (import as ``helpers.<module>``;
pytest.ini puts tests/ on sys.path)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOUBLES = os.path.join(ROOT, "tests", "doubles")
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures")
# The unguarded laguna_dflash.py that the stand-in vLLM ships.
STANDIN_DFLASH = os.path.join(DOUBLES, "vllm_standin", "vllm", "model_executor", "models", "laguna_dflash.py")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (as of now)."""
    import socket  # pylint: disable=import-outside-toplevel

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
