#!/usr/bin/env bash
# Session 26, call C (call B's machine, still warm): the full MoE shapes by poot (the new
# commit) and llama.cpp in the same call: llama-bench (pp512, tg128) and llama-batched-bench
# (16 and 64 rows) beside `poot bench` and `poot bench --rows`.
# Run: bash .bench/s26/c.sh, carry [".bench/s26", ".bench/c48", ".bench/p48"].
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s26/env.sh
echo "poot: $(cat .bench/c48/poot.commit)"
unpack .bench/c48/poot.xz .bench/p48/profile.xz
MG6="$W/models/gpt-oss-20b-6l.gguf"
echo "== gpt-oss 6l decode profile $(date -u +%T)"
timeout 60 "$W/bin/profile" "$MG6" --backend ptx --kv-f16 --capacity 1024 --position 512 --reps 3 --top 12 2>&1 | grep -vE "^(loaded|layout|device)" | sed -n 1,22p
echo "== gpt-oss 6l prefill profile $(date -u +%T)"
timeout 60 "$W/bin/profile" "$MG6" --backend ptx --kv-f16 --prefill 512 --capacity 1024 --reps 3 --top 10 2>&1 | grep -vE "^(loaded|layout|device)" | sed -n 1,18p
ab() { echo "$(basename "$2" .gguf) [${1:-default}] $(POOT_TUNING="$1" timeout ${T:-60} "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
LBB="$W/llama.cpp/build/bin/llama-batched-bench"
for i in $(seq 1 150); do [ -x "$LB" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log") $(date -u +%T)"
for m in "$MG" "$MQ"; do
  wait_model "$m" 200 || continue
  echo "== $(basename "$m") $(date -u +%T)"
  T=120 R=2 ab "" "$m"
  [ -x "$LB" ] && timeout 100 "$LB" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -3
  T=150 rows1 "$m" 64; T=90 rows1 "$m" 16
  [ -x "$LBB" ] && timeout 150 "$LBB" -m "$m" -ngl 99 -fa on -c 16384 -npp 128 -ntg 64 -npl 16,64 2>&1 | grep -E "^\|"
done
date -u
