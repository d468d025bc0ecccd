#!/usr/bin/env bash
# Call D (carries .bench/p2: SmolLM2 part 2): where the time goes: an 8B F16 prompt chunk of
# 512, a 64-row decode step of the 1B F16 model (paged), a 16-row step of the 8B Q4_K_M model
# with the library from 128 rows (default) and from 16.
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s16/env.sh
cp .bench/p2/smollm2.part2 "$W/"
profile "$M8F" --prefill 512 --capacity 640 --position 0 --reps 2
profile "$M1" --rows 64 --paged --capacity 256 --position 192 --reps 3
profile "$M8" --rows 16 --capacity 256 --position 192 --reps 3
POOT_TUNING=lib_rows=16 profile "$M8" --rows 16 --capacity 256 --position 192 --reps 3
date -u
