#!/usr/bin/env bash
# Call B (warm): 8B Q4_K_M and 8B Q4_0 at 16 rows beside llama-batched-bench (poot's default
# tuning: units along each column), then poot with hints ahead (tile_ahead=$AHEAD) in the same
# call.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s21/env.sh
for i in $(seq 1 100); do [ -x "$W/llama.cpp/build/bin/llama-batched-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
wait_model "$M8" 120
ROWS=16 BR=1 ROWS_SECONDS=260 timeout 330 bash bench/h200.sh batched llama8b-q4_k_m 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
[ -n "${AHEAD:-}" ] && T=200 rows1 "$M8" 16 "tile_ahead=$AHEAD"
wait_model "$M8Q" 60
[ "$SECONDS" -lt 330 ] && ROWS=16 BR=1 ROWS_SECONDS=230 timeout $((590 - SECONDS)) bash bench/h200.sh batched llama8b-q4_0 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
(cd "$W/results" && tar czf "$OUT/batched-b.tar.gz" *rows* *batched* 2>/dev/null); date -u
