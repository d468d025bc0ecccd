#!/usr/bin/env bash
# Call D (carries .bench/p3: the last piece of SmolLM2; pieces 0-2 came with calls B and C and
# a copy call): SmolLM2 joined; its committed prompts on PTX (f32 cache; block weights in f16 tiles for 16-token chunks); poot and llama.cpp
# on it (pp512, decode, rows 16 and 64).
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s18/env.sh
cp .bench/p3/* "$W/"
cat "$W"/smollm2.p0 "$W"/smollm2.p1 "$W"/smollm2.p2 "$W"/smollm2.p3 >"$MS.tmp"
[ "$(sha256sum "$MS.tmp" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$W/smollm2.sha256")" ] && mv "$MS.tmp" "$MS" && echo "SmolLM2 joined"
echo "== SmolLM2 committed prompts on PTX (f32 cache; block weights in f16 tiles for 16-token chunks)"
timeout 100 "$W/bin/greedy_check" ptx "$MS" crates/poot-models/tests/fixtures/real/smollm2.json 2>&1 | tail -3
REPEATS=2 GEN=128 timeout 150 bash bench/h200.sh bench smollm2 2>&1 | grep -vE "^\s*$" | tail -6
BR=1 ROWS_SECONDS=100 timeout 220 bash bench/h200.sh batched smollm2 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -20
(cd "$W/results" && tar czf "$OUT/smollm2.tar.gz" smollm2* 2>/dev/null); date -u
