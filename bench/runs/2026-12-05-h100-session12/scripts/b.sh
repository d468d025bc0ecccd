#!/usr/bin/env bash
# Call B (carries .bench/c1: the first third of SmolLM2, kept in the work folder): 8B Q4_K_M,
# 16 rows, gemv_rows 8 (default) / 16 / 32 with the kernel cache warm from call A.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s12/env.sh
cp .bench/c1/smollm2.part0 .bench/c1/smollm2.sha256 "$W/"
for t in "" gemv_rows=16 gemv_rows=32; do rows "$M8" 16 "$t"; done
date -u
