#!/usr/bin/env bash
# Call B (carries .bench/p0: SmolLM2 piece 0): poot alone: 8B Q4_K_M 16 and 64 rows with block
# weights in the library from 16 rows (f16 cache); 1B F16 16 rows, f16/f32 cache.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s17/env.sh
cp .bench/p0/* "$W/"
echo "build: $(tail -1 "$W/build.log")"; uptime
for kv in f16 f32; do rows "$M1" 16 "" $kv; done
wait_model "$M8" 60
rows "$M8" 16 lib_rows=16 f16
rows "$M8" 64 lib_rows=16 f16
echo "build: $(tail -1 "$W/build.log")"; date -u
