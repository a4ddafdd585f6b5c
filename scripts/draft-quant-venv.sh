#!/usr/bin/env bash
# Build (once) the quantization venv that tests/integration/test_draft_quant.py
# hands to the draft_quant role: the role's own pins (draft_quant_packages in
# roles/draft_quant/defaults/main.yml: torch, llm-compressor,
# compressed-tensors; about 1.5 GB), so that the role's pip task only confirms
# them. scripts/setup.sh builds it while the node image builds; the test's
# fixture builds it the same way when it is missing or stale.
#
#   bash scripts/draft-quant-venv.sh      # prints the venv's directory
#
# Location: $LAGUNA_DRAFT_QUANT_VENV, by default <repo>/.cache/draft-quant-venv.
# Python: $LAGUNA_DRAFT_QUANT_PYTHON, by default python3 (as the fixture).
# Stamp: laguna-pins.json in the venv, the pins as JSON, which is what the
# fixture compares; a venv whose stamp matches the pins is left as it is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${LAGUNA_DRAFT_QUANT_VENV:-$root/.cache/draft-quant-venv}"
python="${LAGUNA_DRAFT_QUANT_PYTHON:-python3}"
# Reads the role's defaults (PyYAML): .venv's python unless PYTHON says otherwise.
reader="${PYTHON:-$root/.venv/bin/python}"
defaults="$root/roles/draft_quant/defaults/main.yml"

pins_json="$("$reader" -c 'import json, sys, yaml
print(json.dumps(yaml.safe_load(open(sys.argv[1]))["draft_quant_packages"]))' "$defaults")"
stamp="$venv/laguna-pins.json"

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9  # one build at a time

if [ -f "$stamp" ] && "$reader" -c 'import json, sys
sys.exit(json.load(open(sys.argv[1])) != json.loads(sys.argv[2]))' "$stamp" "$pins_json"; then
  echo "$venv"
  exit 0
fi

start=$(date +%s)
echo "draft-quant-venv: building $venv ($pins_json)" >&2
"$python" -m venv --clear "$venv"
mapfile -t pins < <("$reader" -c 'import json, sys
print("\n".join(json.loads(sys.argv[1])))' "$pins_json")
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
printf '%s' "$pins_json" > "$stamp"
echo "draft-quant-venv: built in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$venv"
