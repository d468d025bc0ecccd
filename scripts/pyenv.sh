#!/usr/bin/env bash
# Creates (or updates) the Python environment used to regenerate reference fixtures, and prints
# its python path. The references (transformers, gguf, llama.cpp, sentence-transformers) are
# independent implementations: their outputs are committed under tests' fixtures, so the test
# suite itself needs none of them.
# Usage: PY=$(scripts/pyenv.sh)        # then: "$PY" scripts/ref/....py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${POOT_CACHE:-$HOME/.cache/poot}/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements-ref.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet -r "$here/requirements-ref.txt" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
