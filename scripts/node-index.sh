#!/usr/bin/env bash
# Build the package index that the molecule nodes install their venv from
# (the venv role's real pip path, offline): a PEP 503 simple index in
#   .cache/node-index/simple/<project>/index.html  ->  .cache/node-index/wheels/*.whl
# holding, for the nodes' platform (bookworm's CPython 3.11, this machine's
# architecture unless LAGUNA_NODE_ARCH says otherwise):
#   - the real Ray (with its `default` extra, as pinned: its metrics agent),
#     huggingface_hub (its `hf` CLI) and ninja wheels with all their
#     dependencies, from PyPI; Ray's and huggingface_hub's versions are
#     the venv role's pins, read from roles/venv/defaults/main.yml (the role
#     leaves ninja's version open);
#   - stand-ins with the real names and versions for what needs a GPU:
#     vllm 0.25.1 (tests/doubles/vllm_standin) and torch 2.11.0+cu130.
# molecule/default/create.yml serves it on the test network. Rebuilt only
# when this script, the pins or the stand-in change.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.cache/node-index}"
PYTHON="${PYTHON:-$root/.venv/bin/python}"
PY_VERSION="${LAGUNA_NODE_PYTHON:-3.11}"
# The line `  - NAME==VERSION` (or `  - NAME[EXTRAS]==VERSION`, e.g. ray[default]) of the venv
# role's venv_pins; fails unless there is exactly one.
role_pin() {
  local found
  found="$(sed -n "s/^  - \($1\(\[[A-Za-z0-9,_-]*\]\)\{0,1\}==[A-Za-z0-9.+!_-]*\)[[:space:]]*\$/\1/p" "$root/roles/venv/defaults/main.yml")"
  if [ -z "$found" ] || [ "$(printf '%s\n' "$found" | wc -l)" -ne 1 ]; then
    echo "node-index: no single '  - $1==VERSION' line in roles/venv/defaults/main.yml (venv_pins)" >&2
    return 1
  fi
  echo "$found"
}
ray_pin="$(role_pin ray)"
hf_pin="$(role_pin huggingface_hub)"
PINS=("$ray_pin" "$hf_pin" ninja==1.13.2)
if [ "${1:-}" = --pins ]; then
  echo "${PINS[*]}"; exit 0
fi
ARCH="${LAGUNA_NODE_ARCH:-$(uname -m)}"
read -r _deb PIP_PLATFORMS <<<"$(bash "$root/scripts/build-node-image.sh" --print-platform "$ARCH")"

stamp="$( (cat "$0"; echo "${PINS[*]} $PY_VERSION $ARCH"; find "$root/tests/doubles/vllm_standin" -type f \
  ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 cat) | sha256sum | cut -c1-16)"
if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$stamp" ]; then
  echo "$dest"; exit 0
fi
rm -rf "$dest"
mkdir -p "$dest/wheels"

# shellcheck disable=SC2086
"$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version "$PY_VERSION" $PIP_PLATFORMS --dest "$dest/wheels" "${PINS[@]}" >&2

# The stand-ins, named and versioned like the real wheels: vLLM (its package
# tree, with the `vllm` console script) and torch.
PYTHONPATH="$root/tests/integration" "$PYTHON" - "$dest" "$root/tests/doubles/vllm_standin" <<'PY'
import hashlib
import html
import os
import re
import sys

import standin_wheels

dest, standin = sys.argv[1], sys.argv[2]
wheels = os.path.join(dest, "wheels")
standin_wheels.make_wheel(wheels, "torch", "2.11.0+cu130")
standin_wheels.make_wheel(wheels, "vllm", "0.25.1", scripts=["vllm"], entry="vllm.entrypoints.cli:main",
                          package_dir=os.path.join(standin, "vllm"))
projects = {}
for name in sorted(os.listdir(wheels)):
    project = re.sub(r"[-_.]+", "-", name.split("-")[0]).lower()
    projects.setdefault(project, []).append(name)
for project, files in projects.items():
    pdir = os.path.join(dest, "simple", project)
    os.makedirs(pdir)
    links = []
    for name in files:
        with open(os.path.join(wheels, name), "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        links.append('<a href="../../wheels/%s#sha256=%s">%s</a><br>' % (html.escape(name), digest, html.escape(name)))
    with open(os.path.join(pdir, "index.html"), "w") as fh:
        fh.write("<!DOCTYPE html><html><body>\n%s\n</body></html>\n" % "\n".join(links))
with open(os.path.join(dest, "simple", "index.html"), "w") as fh:
    fh.write("<!DOCTYPE html><html><body>\n%s\n</body></html>\n"
             % "\n".join('<a href="%s/">%s</a><br>' % (p, p) for p in sorted(projects)))
PY
echo "$stamp" > "$dest/.stamp"
echo "$dest"
