#!/usr/bin/env bash
# Lint gates: ansible-lint (production profile), ansible-test sanity, and
# promtool on the monitoring role's files.
#
# Both tools want the collection at .../ansible_collections/laguna/spark, so
# the working tree (tracked and untracked files, minus what .gitignore drops)
# is copied into such a tree under a temporary directory first; nothing in the
# checkout is changed. ansible-test runs with --venv: it installs its own pinned
# sanity requirements (pylint, pycodestyle, ...) from PyPI into ~/.ansible/test
# once, and needs no container.
#
#   bash scripts/lint.sh              every gate
#   bash scripts/lint.sh lint         ansible-lint only
#   bash scripts/lint.sh sanity [ARGS] ansible-test sanity only (ARGS passed on)
#   bash scripts/lint.sh monitoring   promtool check config / check rules of the
#                                     monitoring role's files, rendered for
#                                     inventory/sparks (scripts/monitoring_render.py)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${LAGUNA_VENV:-$ROOT/.venv}/bin"
PYVER="$("$BIN/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
what="${1:-all}"
[ $# -gt 0 ] && shift

work="$(mktemp -d "${TMPDIR:-/tmp}/laguna-lint.XXXXXX")"
trap 'rm -rf "$work"' EXIT
coll="$work/ansible_collections/laguna/spark"
mkdir -p "$coll"

# The files of the working tree, without ignored ones (.venv, .cache, ...) and
# without files deleted but not yet committed.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -C "$coll" -xf -
  # ansible-test lists a collection's files through git when it is a repository.
  git -C "$coll" init -q
  git -C "$coll" add -A
else
  tar --exclude=.venv --exclude=.cache --exclude=.git --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude='*.tar.gz' -cf - . | tar -C "$coll" -xf -
fi

export PATH="$BIN:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$work"
export ANSIBLE_NOCOLOR=1 NO_COLOR=1 PY_COLORS=0
status=0

if [ "$what" = all ] || [ "$what" = lint ]; then
  echo "== ansible-lint --profile production"
  # --offline: no galaxy look-ups; the collection needs no other collection.
  (cd "$coll" && ansible-lint --offline --profile production --nocolor) || status=1
fi

if [ "$what" = all ] || [ "$what" = sanity ]; then
  echo "== ansible-test sanity (python $PYVER)"
  # ansible-test would download its get-pip script from outside the package
  # index; cache a bootstrap that uses ensurepip and the index instead.
  pip_version="$("$BIN/python" -c 'from ansible_test._internal.python_requirements import get_venv_packages
class P: version = "'"$PYVER"'"
print(get_venv_packages(P)["pip"])')"
  cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
  mkdir -p "$(dirname "$cache")"
  cmp -s scripts/ansible-test-get-pip.py "$cache" || cp scripts/ansible-test-get-pip.py "$cache"
  (cd "$coll" && ansible-test sanity --requirements --python "$PYVER" --color no "$@") || status=1
fi

if [ "$what" = all ] || [ "$what" = monitoring ]; then
  echo "== promtool check config / check rules (the monitoring role's files)"
  # The distribution's promtool (scripts/promtool.sh: fetched once, not installed).
  if promtool="$(bash scripts/promtool.sh)"; then
    out="$work/monitoring"
    if "$BIN/python" scripts/monitoring_render.py "$out" >/dev/null; then
      "$promtool" check rules "$out/rules.yml" || status=1
      "$promtool" check config "$out/prometheus.yml" || status=1
    else
      status=1
    fi
  else
    status=1
  fi
fi

exit "$status"
