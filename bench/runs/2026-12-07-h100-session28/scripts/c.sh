#!/usr/bin/env bash
# Session 28, call C (one call instead of A and B, the device time left after refused starts):
# the shared suite on PTX at the new commit; where a lone SmolLM2-shaped request's time goes
# (`poot bench` contiguous and paged, per-kernel profiles of both steps, poot-serve at one
# client with one paged row and with 64); the 8B model served at 8 clients by poot alone.
# Run: bash .bench/s28/c.sh, carry [".bench/s28", ".bench/c52", ".bench/c52g"].
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s28/env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s28/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py scripts/bench/serve_sweep.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "smollm2-shaped-q4_0 smollm2 q4_0" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c52/poot.xz .bench/c52/poot-serve.xz .bench/c52g/greedy_check.xz .bench/c52g/profile.xz
export POOT_PTX_COMPILE_THREADS=0
echo "== suite on PTX $(date -u +%T)"
timeout 170 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
MS="$W/models/smollm2-shaped-q4_0.gguf"; M8="$W/models/llama-8b-q4_k_m.gguf"
wait_file "$MS" 60
lone() { # FLAGS..: one row, 512 + 128 tokens, 3 repeats
  echo "lone $* $(timeout 90 "$W/bin/poot" bench "$MS" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 3 "$@" 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
echo "== lone $(date -u +%T)"
lone; lone --paged --capacity 2048
serve() { # MODEL VOCAB C LOAD NAME FLAGS..: poot-serve, one sweep level
  local m="$1" vocab="$2" c="$3" load="$4" name="$5" pid; shift 5
  "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 "$@" >"$W/results/$name.serve.log" 2>&1 &
  pid=$!
  for i in $(seq 1 900); do health http://127.0.0.1:18080 && break; sleep 0.2; done
  # A warm-up round first: a cold kernel cache prepares the level's step variants when first needed.
  for l in ${WARMUP:+$load}; do
    python3 "$W/scripts/serve_sweep.py" --url http://127.0.0.1:18080 --vocab "$vocab" \
      --concurrency "$c" --load "$l" --min-requests 8 --label warm-up 2>&1 | tail -1
  done
  for l in $load; do
    python3 "$W/scripts/serve_sweep.py" --url http://127.0.0.1:18080 --vocab "$vocab" --concurrency "$c" \
      --load "$l" --min-requests 8 --label "poot $name" --json "$W/results/$name.$l.serve.json" 2>&1 | tail -1
  done
  kill $pid; wait $pid 2>/dev/null
}
echo "== one client $(date -u +%T)"
WARMUP=1 serve "$MS" 49152 1 fixed c1-p1-paged --parallel 1 --ctx-size 2048 --kv-blocks 128
WARMUP=1 serve "$MS" 49152 1 fixed c1-p64 --parallel 64 --ctx-size 2048
WARMUP=1 serve "$MS" 49152 1 fixed c1-p64-chain16 --parallel 64 --ctx-size 2048 --decode-chain 16
mkdir -p "$OUT/results"; cp "$W"/results/*.serve.* "$OUT/results/" 2>/dev/null
echo "== profiles $(date -u +%T)"
for paged in "" --paged; do
  echo "-- profile $paged"
  timeout 60 "$W/bin/profile" "$MS" --backend ptx --capacity 2048 --position 576 --top 14 $paged 2>&1 | grep -vE "^\s*$" | head -60
done
echo "== 8B at 8 clients $(date -u +%T)"
wait_file "$M8" 150 && [ $SECONDS -lt 420 ] && WARMUP=1 serve "$M8" 128256 8 "fixed spread" c8-8b --parallel 64 --ctx-size 2048
cp "$W"/results/*.serve.* "$OUT/results/" 2>/dev/null; date -u; echo "${SECONDS} s"
