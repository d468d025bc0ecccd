#!/usr/bin/env bash
# Session 30, call D (warm): a lone SmolLM2-shaped request served at --parallel 8 and 64 with
# chains of 8 and 16 decode steps: where the 64-row server's cost per chain comes from.
# Run: bash .bench/s30/d.sh, carry [".bench/s30"].
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s30/env.sh 2>/dev/null || true
MS="$W/models/smollm2-shaped-q4_0.gguf"
sed -n '/^served()/,/^}/p' .bench/s30/c.sh > "$W/served.sh"; source "$W/served.sh"
VOCAB=49152 served "$MS" smol-p8 --parallel 8 --ctx-size 2048
VOCAB=49152 served "$MS" smol-p64-chain16 --parallel 64 --ctx-size 2048 --decode-chain 16
VOCAB=49152 served "$MS" smol-p1-chain16 --parallel 1 --ctx-size 2048 --kv-blocks 128 --decode-chain 16
mkdir -p "$OUT/r"; cp "$W"/results/smol-p8* "$W"/results/*chain16* "$OUT/r/"; date -u; echo "${SECONDS} s"
