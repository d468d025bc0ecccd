#!/usr/bin/env bash
# Call G: 1B F16 and 8B F16 by both engines (pp512, decode), once llama-bench is built.
set -uo pipefail
exec > >(tee -a "$OUT/g.log") 2>&1
source .bench/s16/env.sh
for i in $(seq 1 150); do [ -x "$W/llama.cpp/build/bin/llama-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
wait_model "$M8F" 200
REPEATS=2 GEN=128 timeout 400 bash bench/h200.sh bench llama1b-f16 llama8b-f16 2>&1 | grep -vE "^\s*$" | tail -12
(cd "$W/results" && tar czf "$OUT/g-results.tar.gz" llama1b-f16.* llama8b-f16.* 2>/dev/null); date -u
