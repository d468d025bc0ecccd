#!/usr/bin/env bash
# Call C (carries .bench/p2: SmolLM2 part 2): prefill A/B of lib_decode=0/1 on 1B Q4_0 and
# 8B Q4_K_M; 16 rows on 8B Q4_K_M with the library taking block weights from lib_rows 16, 32 or
# 128 (the default).
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s15/env.sh
cp .bench/p2/smollm2.part2 "$W/"
wait_model "$M1Q" 60 && for t in lib_decode=0 lib_decode=1; do pp "$M1Q" "$t"; done
wait_model "$M8" 200 && for t in lib_decode=0 lib_decode=1; do pp "$M8" "$t"; done
for t in "" lib_rows=16 lib_rows=32; do rows "$M8" 16 "$t"; done
ls -la "$W/models"; echo "build: $(tail -1 "$W/build.log")"; date -u
