"""Helpers shared by the unit and integration tests (import as ``helpers.<module>``;
pytest.ini puts tests/ on sys.path)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOUBLES = os.path.join(ROOT, "tests", "doubles")
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures")
# The unguarded laguna_dflash.py that the stand-in vLLM ships.
STANDIN_DFLASH = os.path.join(DOUBLES, "vllm_standin", "vllm", "model_executor", "models", "laguna_dflash.py")
