#!/usr/bin/env bash
# Call B (carries .bench/p0: SmolLM2 piece 0): poot alone, 8B Q4_K_M and Q4_0 rows: block
# weights in f16 tiles (default), the tf32 tiles before them (block_tiles=0), the library from
# 16 rows (lib_rows=16).
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s18/env.sh
cp .bench/p0/* "$W/"
echo "build: $(tail -1 "$W/build.log")"
wait_model "$M8" 60
rows1 "$M8" 16 ""; rows1 "$M8" 16 lib_rows=16; rows1 "$M8" 64 ""; rows1 "$M8" 64 lib_rows=16
wait_model "$M8Q" 60
profile "$M1Q" --rows 16 --paged --capacity 256 --position 200
rows1 "$M8Q" 16 ""
echo "build: $(tail -1 "$W/build.log")"; date -u
