#!/usr/bin/env bash
# Build (once) the venv with the real Hugging Face CLI that the staging tests
# run against the local Hub double (tests/doubles/hub/hub.py).
#   bash scripts/hf-venv.sh [DIR]     # default: .cache/hf-venv; prints DIR/bin/hf
#   bash scripts/hf-venv.sh --pin     # prints the pin only
# The pin is the venv role's own (roles/venv/defaults/main.yml, venv_pins:
# the line `  - huggingface_hub==VERSION`), read from there and nowhere else,
# so the `hf` the tests run is the one a Spark's vLLM venv gets. A venv_pins
# without exactly one such line fails here.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
defaults="$root/roles/venv/defaults/main.yml"
HF_HUB_PIN="$(sed -n 's/^  - \(huggingface_hub==[A-Za-z0-9.+!_-]*\)[[:space:]]*$/\1/p' "$defaults")"
if [ -z "$HF_HUB_PIN" ] || [ "$(printf '%s\n' "$HF_HUB_PIN" | wc -l)" -ne 1 ]; then
  echo "hf-venv: no single '  - huggingface_hub==VERSION' line in $defaults (venv_pins)" >&2
  exit 1
fi
if [ "${1:-}" = --pin ]; then
  echo "$HF_HUB_PIN"; exit 0
fi
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
