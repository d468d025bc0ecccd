#!/usr/bin/env bash
# Call E: SmolLM2's committed prompts with block weights in the library from 16 rows; rows 16
# and 64 beside llama-batched-bench for the other three synthetic models (lib_rows=16).
set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s17/env.sh
echo "== SmolLM2 committed prompts on PTX, lib_rows=16"
POOT_TUNING=lib_rows=16 timeout 100 "$W/bin/greedy_check" ptx "$MS" crates/poot-models/tests/fixtures/real/smollm2.json 2>&1 | tail -2
POOT_TUNING=lib_rows=16 BR=1 ROWS_SECONDS=200 timeout 520 bash bench/h200.sh batched llama1b-q4_0 llama8b-q4_0 llama8b-f16 2>&1 | grep -E "^==|decode_tok_s|rror|failed" | cut -c1-400 | head -40
(cd "$W/results" && tar czf "$OUT/batched.tar.gz" *rows* *batched* 2>/dev/null); date -u
