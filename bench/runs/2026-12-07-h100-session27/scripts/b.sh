#!/usr/bin/env bash
# Session 27, calls B on: each serving model left, both engines in the same call (warm
# kernel cache from call A's cold starts), while the call has time for one more.
# Run: bash .bench/s27/b.sh, carry [".bench/s27"].
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s27/env.sh
for name in ${NAMES:-smollm2s-q4_0 llama1b-f16 llama8b-q4_k_m}; do
  [ -f "$W/done-$name" ] && continue
  [ "$SECONDS" -lt "${LIMIT:-240}" ] || break
  echo "== $name $(date -u +%T)"
  STARTS=warm SERVE_CTX=2048 LOADS="fixed spread" bash bench/h200.sh serve "$name" && touch "$W/done-$name"
done
save; ls "$W"/done-* ; date -u
