#!/usr/bin/env bash
# Call F (carries .bench/p0): 8B Q4_K_M rows 16 and 64, block tiles (default) against the library
# from 16 rows; a profile of the 16-row step.
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s18/env.sh
cp .bench/p0/* "$W/"
wait_model "$M8" 60
for t in "" lib_rows=16; do rows1 "$M8" 16 "$t"; done
for t in "" lib_rows=16; do rows1 "$M8" 64 "$t"; done
profile "$M8" --rows 16 --paged --capacity 256 --position 200 | head -40
echo "build: $(tail -1 "$W/build.log")"; date -u
