#!/usr/bin/env bash
# Call B (warm, after A): the Qwen3-30B-A3B-shaped Q4_K_M mixture of experts, one row decode and
# pp512, poot (routed experts through the indexed decode-shaped kernel) beside llama-bench in
# the same call; then whatever of A's serving runs did not fit.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s22/env.sh
for i in $(seq 1 120); do [ -x "$LB" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
wait_model "$MQ" 200 && ls -la "$MQ"
echo "== poot $(date -u +%T)"
timeout 300 "$W/bin/poot" bench "$MQ" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 2>&1 | tail -12
echo "== llama-bench $(date -u +%T)"
[ -x "$LB" ] && timeout 200 "$LB" -m "$MQ" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -6
date -u
