#!/usr/bin/env bash
# Call F: where a 16-row step of the 8B Q4_K_M model spends its time (lib_rows=16, f16 cache,
# paged); 1B F16 at a long context (a 3968-token prompt), f16 and f32 cache.
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s17/env.sh
POOT_TUNING=lib_rows=16 profile "$M8" --rows 16 --paged --capacity 256 --position 200
for kv in f16 f32 f16 f32; do
  echo "llama-1b-f16 long kv $kv $(timeout 120 "$W/bin/poot" bench "$M1" --backend ptx --kv-type $kv --prompt-tokens 3968 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
done
date -u
