#!/usr/bin/env bash
# Call D: poot (library contractions on: POOT_TUNING=lib=1) and llama-bench on every row, each
# model by both engines back to back (pp512, tg128, 3 repeats).
source .bench/s11/common.sh
for i in $(seq 1 200); do grep -q "built in" "$W/build.log" && break; sleep 1; done; tail -1 "$W/build.log"
for i in $(seq 1 120); do pgrep -f synthetic_gguf >/dev/null || break; sleep 1; done
ls -la "$W/models"
POOT_TUNING=lib=1 REPEATS=3 bash bench/h200.sh bench smollm2 llama1b-f16 llama1b-q4_0 llama8b-q4_0 llama8b-q4_k_m llama8b-f16
cp "$W/out/results.tar.gz" "$OUT/bench-results.tar.gz"; cp "$W/out/table.md" "$OUT/"
date -u
