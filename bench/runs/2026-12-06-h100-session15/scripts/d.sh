#!/usr/bin/env bash
# Call D (carries .bench/p3: SmolLM2 part 3): SmolLM2 joined, its committed prompts on PTX and its
# prefill A/B of lib_decode; 64 rows on 8B Q4_K_M and 16/64 on SmolLM2 with lib_rows 16 against
# the default; where a 512-token prompt chunk's time goes on 8B F16 and 8B Q4_K_M; a 64-row
# decode step of the 1B F16 model profiled (paged).
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s15/env.sh
cat "$W/smollm2.part0" "$W/smollm2.part1" "$W/smollm2.part2" .bench/p3/smollm2.part3 >"$MS.tmp"
[ "$(sha256sum "$MS.tmp" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$W/smollm2.sha256")" ] && mv "$MS.tmp" "$MS" && echo "SmolLM2 joined"
echo "== SmolLM2 committed prompts on PTX"
timeout 100 "$W/bin/greedy_check" ptx "$MS" crates/poot-models/tests/fixtures/real/smollm2.json 2>&1 | tail -3
for t in "" lib_rows=16; do rows "$M8" 64 "$t"; rows "$MS" 64 "$t"; done
wait_model "$M8F" 100 && profile "$M8F" --prefill 512 --capacity 640 --position 0 --reps 2
wait_model "$M1" 10 && profile "$M1" --rows 64 --paged --capacity 256 --position 192 --reps 3
ls -la "$W/models"; echo "build: $(tail -1 "$W/build.log")"; date -u
