"""Constants that several test suites share (tests/unit, tests/integration, tests/conformance and
molecule/default): the recipe's served model and figures, the collection's default unit names, and
the molecule scenario's nodes, user, paths and secrets.

Each is written once here, and tests/unit/test_shared_constants.py holds it against its source (the
roles' defaults, the recipe's text, molecule/default/molecule.yml), so a change there fails that
test instead of leaving the suites testing an old value. The molecule suites import this module too
(pytest.ini puts tests/ on sys.path; they also add it themselves, for a run outside the project's
pytest.ini).
"""

# The recipe's `vllm serve` (roles/vllm_serve/defaults/main.yml has the same values).
SERVED_MODEL = "laguna-s-fp8"
MAX_MODEL_LEN = 262144
API_PORT = 8000
# What the recipe's vLLM log says on two Sparks: "GPU KV cache size: 273,095 tokens",
# "Maximum concurrency for 262,144 tokens per request: 1.04x".
KV_CACHE_TOKENS = 273095
MAX_CONCURRENCY = 1.04

# The collection's unit names (roles/laguna/defaults/main.yml).
VLLM_UNIT = "laguna-vllm"
RAY_HEAD_UNIT = "laguna-ray-head"
RAY_WORKER_UNIT = "laguna-ray-worker"
# The firewall role's boot unit (roles/firewall/vars/main.yml).
FIREWALL_UNIT = "laguna-spark-firewall.service"

# The molecule scenario (molecule/default/molecule.yml): two nodes on the test network, the
# service user of the node image, the API key its inventory sets, where the roles put things.
MOLECULE_HEAD, MOLECULE_WORKER = "laguna-head", "laguna-worker"
MOLECULE_ROCE_IP = {MOLECULE_HEAD: "10.89.77.11", MOLECULE_WORKER: "10.89.77.12"}
MOLECULE_USER, MOLECULE_UID = "spark", 1000
MOLECULE_HOME = "/home/spark"
MOLECULE_API_KEY = "molecule-api-key-0123456789abcdef"
MOLECULE_VENV = MOLECULE_HOME + "/venvs/vllm-025"
MOLECULE_MODELS = MOLECULE_HOME + "/models/hf"
MOLECULE_MODEL = MOLECULE_MODELS + "/Laguna-S-2.1-FP8"
MOLECULE_DRAFT = MOLECULE_MODELS + "/Laguna-S-2.1-DFlash-W4A16"
MOLECULE_RAY_TOKEN_PATH = MOLECULE_HOME + "/.ray/auth_token"
# The scenario's vllm_serve_health_timeout (the hang check's bound, the smoke test's too)
# and the stand-in's wedge file (LAGUNA_STANDIN_WEDGE_FILE in its vllm_serve_environment).
MOLECULE_HEALTH_TIMEOUT = 10
MOLECULE_WEDGE_FILE = "/etc/laguna-standin/wedge"
