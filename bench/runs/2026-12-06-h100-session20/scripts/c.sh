#!/usr/bin/env bash
# Call C (warm): 8B Q4_0 rows 16 beside llama-batched-bench; the 8B Q4_K_M 16-row step profiled.
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s20/env.sh
unpack .bench/c13p/*.xz
ROWS=16 BR=1 ROWS_SECONDS=260 timeout 320 bash bench/h200.sh batched llama8b-q4_0 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
(cd "$W/results" && tar czf "$OUT/batched-c.tar.gz" *rows* *batched* 2>/dev/null)
profile "$M8" --rows 16 --paged --capacity 256 --position 200 | head -45
date -u
