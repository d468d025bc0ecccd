#!/usr/bin/env bash
# Call E (warm machine): 16 rows with gemv_rows 8 / 16 / 32 on the 1B F16 model and SmolLM2;
# the 1B F16 decode step profiled contiguous / paged (a lone request's gap, #22).
set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s12/env.sh
for t in "" gemv_rows=16 gemv_rows=32; do rows "$MS" 16 "$t"; done
for t in "" gemv_rows=16 gemv_rows=32; do rows "$M1" 16 "$t"; done
profile "$M1"; profile "$M1" --paged
date -u
