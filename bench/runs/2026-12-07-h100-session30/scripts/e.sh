#!/usr/bin/env bash
# Session 30, call E (warm): whether the pool's size sets a lone request's speed: --parallel 64
# over 256 blocks, --parallel 1 over the default pool (every block that fits the memory).
# Run: bash .bench/s30/e.sh, carry [".bench/s30"].
set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s30/env.sh 2>/dev/null || true
MS="$W/models/smollm2-shaped-q4_0.gguf"
sed -n '/^served()/,/^}/p' .bench/s30/c.sh > "$W/served.sh"; source "$W/served.sh"
VOCAB=49152 served "$MS" smol-p64-blocks256 --parallel 64 --ctx-size 2048 --kv-blocks 256
VOCAB=49152 served "$MS" smol-p1-default-pool --parallel 1 --ctx-size 2048
mkdir -p "$OUT/r"; cp "$W"/results/*blocks256* "$W"/results/*default-pool* "$OUT/r/"; date -u; echo "${SECONDS} s"
