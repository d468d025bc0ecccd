#!/usr/bin/env bash
# Call C (carries .bench/p1: SmolLM2 piece 1): rows 16 and 64 beside llama-batched-bench for the
# block-quantized models, defaults (block weights in f16 tiles).
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s18/env.sh
cp .bench/p1/* "$W/"
for i in $(seq 1 100); do [ -x "$W/llama.cpp/build/bin/llama-batched-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
echo "POOT_TUNING=${T:-}"
POOT_TUNING="${T:-}" BR=1 ROWS_SECONDS=200 timeout 570 bash bench/h200.sh batched ${MODELS_C:-llama1b-q4_0 llama8b-q4_k_m llama8b-q4_0} 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -60
(cd "$W/results" && tar czf "$OUT/batched.tar.gz" *rows* *batched* 2>/dev/null); date -u
