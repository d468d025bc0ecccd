#!/usr/bin/env bash
# Session 30, call C (the machine of call A, kept warm): the shared suite on PTX with
# decode_positions=8, and a lone request served at --parallel 64 with it (SmolLM2 shape, 1B F16).
# Run: bash .bench/s30/c.sh, carry [".bench/s30"].
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s30/env.sh 2>/dev/null || true
[ -x "$W/bin/poot-serve" ] || { echo "machine not kept warm"; exit 1; }
MS="$W/models/smollm2-shaped-q4_0.gguf"; M1="$W/models/llama-1b-f16.gguf"
export POOT_PTX_COMPILE_THREADS=0
echo "== suite on PTX, decode_positions=8 $(date -u +%T)"
POOT_TUNING=decode_positions=8 timeout 130 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
served() {
  local m="$1" name="$2" pid w=0; shift 2
  "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 "$@" >"$W/results/$name.serve.log" 2>&1 &
  pid=$!
  for i in $(seq 1 900); do health http://127.0.0.1:18080 && break; sleep 0.2; done
  while [ $w -lt 45 ] && ! grep -q "every step variant is prepared" "$W/results/$name.serve.log"; do sleep 1; w=$((w + 1)); done
  echo "$name: every variant $w s after ready"
  python3 "$W/scripts/serve_sweep.py" --url http://127.0.0.1:18080 --vocab "$VOCAB" --concurrency 1 \
    --load fixed --min-requests 8 --label "poot $name" --json "$W/results/$name.fixed.serve.json" 2>&1 | tail -1
  kill $pid; wait $pid 2>/dev/null
}
echo "== served, decode_positions=8 $(date -u +%T)"
POOT_TUNING=decode_positions=8 VOCAB=49152 served "$MS" smol-p64-dp8 --parallel 64 --ctx-size 2048
VOCAB=49152 served "$MS" smol-p64-again --parallel 64 --ctx-size 2048
[ $SECONDS -lt 250 ] && POOT_TUNING=decode_positions=8 VOCAB=128256 served "$M1" 1b-p64-dp8 --parallel 64 --ctx-size 2048
save; date -u; echo "${SECONDS} s"
