#!/usr/bin/env bash
# Session 27, call C: the shared suite on PTX at the new commit (keys and values from the f16
# cache skip their tf32 low part in the prompt attention); the decode-shaped kernels' row
# limit (gemv_rows) A/B at 2, 4 and 8 rows decoding (the serving sweep's 8 clients on the 8B
# Q4_K_M model ran 6x slower a step than one); prefill of the new binary beside ecda413.
# Run: bash .bench/s27/c.sh, carry [".bench/s27", ".bench/c51", ".bench/o50"].
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s27/env.sh
echo "new: $(cat .bench/c51/poot.commit), baseline ecda413"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s27/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "smollm2-shaped-q4_0 smollm2 q4_0" "llama-8b-q4_k_m 8b q4_k_m" "llama-1b-f16 1b f16" >/dev/null 2>&1 &)
rm -f "$W/bin/poot" "$W/bin/greedy_check"
unpack .bench/c51/poot.xz .bench/c51/greedy_check.xz .bench/o50/poot-ecda413.xz
export POOT_PTX_COMPILE_THREADS=0
echo "== suite on PTX $(date -u +%T)"
timeout 170 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
rows() { # MODEL ROWS TUNING
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] $(POOT_TUNING="${3:-}" timeout ${T:-120} "$W/bin/poot" bench "$1" --backend ptx --rows "$2" --prompt-tokens 128 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
pp() { # BIN MODEL
  echo "$(basename "$2" .gguf) [$1] $(timeout ${T:-120} "$W/bin/$1" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 32 --repeats 2 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
M8="$W/models/llama-8b-q4_k_m.gguf"; M1="$W/models/llama-1b-f16.gguf"; MS="$W/models/smollm2-shaped-q4_0.gguf"
lone() { # MODEL FLAGS..: one row, 512 + 128 tokens, 2 repeats
  local m="$1"; shift
  echo "$(basename "$m" .gguf) one row $* $(timeout ${T:-120} "$W/bin/poot" bench "$m" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 "$@" 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
wait_file "$MS" 60 && { echo "== lone $(date -u +%T)"; lone "$MS"; lone "$MS" --capacity 2048; lone "$MS" --paged; lone "$MS" --paged --capacity 2048; }
wait_file "$M8" 200 && {
  echo "== rows $(date -u +%T)"
  for n in 8 4 2; do for g in 8 1; do rows "$M8" $n gemv_rows=$g; done; done
  rows "$M8" 8 gemv_rows=4
  echo "== prefill $(date -u +%T)"
  pp poot "$M8"; pp poot-ecda413 "$M8"
}
wait_file "$M1" 60 && { for g in 8 1; do rows "$M1" 8 gemv_rows=$g; done; pp poot "$M1"; pp poot-ecda413 "$M1"; }
date -u
