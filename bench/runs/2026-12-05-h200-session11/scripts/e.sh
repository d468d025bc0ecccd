#!/usr/bin/env bash
# Call E: speculative decoding beside llama-lookup / llama-speculative; then many rows decoding
# together (poot bench --rows 16/64 with lib=1, beside llama-batched-bench).
source .bench/s11/common.sh
REPEATS=2 bash bench/h200.sh spec
cp "$W/out/results.tar.gz" "$OUT/spec-results.tar.gz"
rm -f "$W"/results/*.rows*.json "$W"/results/*.batched.*
POOT_TUNING=lib=1 BR=2 bash bench/h200.sh batched smollm2 llama1b-f16 llama8b-q4_k_m
tar -czf "$OUT/batched-results.tar.gz" -C "$W/results" .
date -u
