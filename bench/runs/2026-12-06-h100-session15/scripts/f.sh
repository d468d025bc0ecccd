#!/usr/bin/env bash
# Call F: rows 16 and 64 beside llama-batched-bench (SmolLM2, 1B F16, 8B Q4_K_M), POOT_TUNING as
# given in $T (the lib_rows the A/B chose; empty: defaults).
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s15/env.sh
echo "POOT_TUNING=${T:-}"
POOT_TUNING="${T:-}" BR=1 ROWS_SECONDS=150 timeout 570 bash bench/h200.sh batched ${MODELS_F:-smollm2 llama1b-f16 llama8b-q4_k_m} 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -60
mkdir -p "$OUT/batched" && cp "$W"/results/*rows* "$W"/results/*batched* "$OUT/batched/" 2>/dev/null; date -u
