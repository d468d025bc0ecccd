#!/usr/bin/env bash
# Creates (or updates) a Python environment and prints its python path.
#   scripts/pyenv.sh          the reference environment ($POOT_CACHE/venv, requirements-ref.txt):
#                             the independent implementations (transformers, gguf, llama.cpp,
#                             sentence-transformers) that regenerate reference fixtures; their
#                             outputs are committed under tests' fixtures, so the test suite
#                             itself needs none of them.
#   scripts/pyenv.sh client   the client environment ($POOT_CACHE/venv-client,
#                             requirements-client.txt): the official `openai` client that
#                             poot-serve's tests run against the server (scripts/test.sh makes it).
# Usage: PY=$(scripts/pyenv.sh)        # then: "$PY" scripts/ref/....py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${POOT_CACHE:-$HOME/.cache/poot}"
case "${1:-ref}" in
  ref) venv="$cache/venv"; requirements="$here/requirements-ref.txt" ;;
  client) venv="$cache/venv-client"; requirements="$here/requirements-client.txt" ;;
  *) echo "pyenv.sh: unknown environment '$1' (known: ref client)" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
stamp="$venv/.requirements.sha256"
want="$(cat "$requirements" "$here/requirements-client.txt" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
