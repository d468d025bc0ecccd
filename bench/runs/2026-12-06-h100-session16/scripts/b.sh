#!/usr/bin/env bash
# Call B (carries .bench/r0: SmolLM2 part 0): poot and llama-bench on the five synthetic rows,
# each model by both engines (REPEATS=2), once llama-bench is built.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s16/env.sh
cp .bench/r0/smollm2.part0 .bench/r0/smollm2.sha256 "$W/"
for i in $(seq 1 150); do [ -x "$W/llama.cpp/build/bin/llama-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"; ls -la "$W/models"
wait_model "$M8F" 120
REPEATS=2 GEN=128 timeout 500 bash bench/h200.sh bench llama1b-f16 llama1b-q4_0 llama8b-q4_k_m llama8b-q4_0 llama8b-f16 2>&1 | grep -vE "^\s*$" | tail -30
mkdir -p "$OUT/gpu" && cp "$W"/results/*.json "$W"/results/*.log "$OUT/gpu/" 2>/dev/null; date -u
