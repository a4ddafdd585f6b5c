#!/usr/bin/env bash
# Build (once) the venv with the real Hugging Face CLI that the staging tests
# run against the local Hub double (tests/doubles/hub/hub.py).
#   bash scripts/hf-venv.sh [DIR]     # default: .cache/hf-venv; prints DIR/bin/hf
# The pin is the huggingface_hub that `pip install vllm==0.25.1` resolves
# (vLLM requires transformers>=5.5.3; transformers 5.24 requires
# huggingface-hub>=2.4,<3) — the one a Spark's vLLM venv has.
set -euo pipefail
HF_HUB_PIN="${HF_HUB_PIN:-huggingface_hub==2.4.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/.cache/hf-venv}"
stamp="$dir/.pin"
if [ -x "$dir/bin/hf" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$HF_HUB_PIN" ]; then
  echo "$dir/bin/hf"; exit 0
fi
rm -rf "$dir"
python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check "$HF_HUB_PIN" >&2
echo "$HF_HUB_PIN" > "$stamp"
echo "$dir/bin/hf"
