#!/usr/bin/env bash
# Call H: where an 8B F16 prompt chunk's time goes; 16 rows of the 8B Q4_K_M model (paged) with
# the library from 128 rows and from 16, profiled and benchmarked.
set -uo pipefail
exec > >(tee -a "$OUT/h.log") 2>&1
source .bench/s16/env.sh
profile "$M8F" --prefill 512 --capacity 640 --position 0 --reps 2 | head -24
for t in "" lib_rows=16; do POOT_TUNING=$t profile "$M8" --rows 16 --paged --capacity 256 --position 192 --reps 3 | head -30; done
for t in lib_rows=16; do rows "$M8" 16 "$t"; rows "$M8" 64 "$t"; done
date -u
