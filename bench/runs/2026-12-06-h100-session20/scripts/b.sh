#!/usr/bin/env bash
# Call B (warm): 8B Q4_K_M and 1B Q4_0 rows 16 beside llama-batched-bench; 8B Q4_K_M rows 16
# with poot at 58edcab (session 19's build) in the same call.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s20/env.sh
for i in $(seq 1 100); do [ -x "$W/llama.cpp/build/bin/llama-batched-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
ROWS=16 BR=1 ROWS_SECONDS=200 timeout 260 bash bench/h200.sh batched llama8b-q4_k_m 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
BIN="$W/old/poot" T=200 rows1 "$M8" 16 ""
ROWS=16 BR=1 ROWS_SECONDS=200 timeout $((560 - SECONDS)) bash bench/h200.sh batched llama1b-q4_0 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
(cd "$W/results" && tar czf "$OUT/batched-b.tar.gz" *rows* *batched* 2>/dev/null); date -u
