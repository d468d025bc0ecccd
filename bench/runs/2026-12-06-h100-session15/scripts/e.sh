#!/usr/bin/env bash
# Call E: poot and llama-bench on all six rows, each model by both engines (REPEATS=3).
set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s15/env.sh
for i in $(seq 1 120); do [ -x "$W/llama.cpp/build/bin/llama-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
REPEATS=3 GEN=128 timeout 560 bash bench/h200.sh bench 2>&1 | grep -vE "^\s*$" | tail -40
mkdir -p "$OUT/gpu" && cp "$W"/results/*.json "$W"/results/*.log "$OUT/gpu/" 2>/dev/null; date -u
