#!/usr/bin/env bash
# Session 25, call B (same machine as A): whatever A left: llama-bench, llama-batched-bench,
# and A/Bs of the routed tiles. Run: bash .bench/s25/b.sh, carry [".bench/s25", ".bench/c45"].
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s25/env.sh
echo "poot: $(cat .bench/c45/poot.commit)"
unpack .bench/c45/poot.xz .bench/c45/greedy_check.xz
for i in $(seq 1 200); do [ -x "$LB" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log") $(date -u +%T)"
ab() { echo "$(basename "$2" .gguf) [${1:-default}] $(POOT_TUNING="$1" timeout ${T:-60} "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
for m in "$MQ" "$MG"; do
  echo "== $(basename "$m") $(date -u +%T)"
  T=120 R=2 ab "" "$m"
  [ -x "$LB" ] && timeout 100 "$LB" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -4
done
T=90 rows1 "$MQ" 16; T=90 rows1 "$MQ" 64; T=90 rows1 "$MG" 64
for m in "$MQ" "$MG"; do [ -x "$LB" ] && timeout 150 "$W/llama.cpp/build/bin/llama-batched-bench" -m "$m" -ngl 99 -fa on -c 16384 -npp 128 -ntg 64 -npl 16,64 2>&1 | grep -E "^\|" ; done
date -u
