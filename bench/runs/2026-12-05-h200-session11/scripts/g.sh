#!/usr/bin/env bash
# Call G (fresh machine, carries .bench/c4: poot and greedy_check at the tip with the gemv_rows
# and lib_rows tunings, and the gguf wheel): the synthetic models written in the background
# while the shared suite runs on PTX with gemv_rows=16; then batched decode A/B, poot alone:
# 16 rows with gemv_rows 8 (default) / 16, 64 rows with lib_rows 128 (default) / 64.
set -uo pipefail
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
cat .bench/c4/poot.commit
for f in poot greedy_check; do xz -dc ".bench/c4/$f.xz" >"$W/bin/$f"; chmod +x "$W/bin/$f"; done
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c4/gguf-*.whl
for spec in "1b f16 llama-1b-f16" "8b q4_k_m llama-8b-q4_k_m"; do
  read -r shape kind name <<<"$spec"
  (PYTHONPATH="$W/site" python3 scripts/bench/synthetic_gguf.py --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1 &)
done
echo "== suite, gemv_rows=16"
POOT_TUNING=gemv_rows=16 timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "^FAIL|^suite:|rror" | head -20
for i in $(seq 1 120); do pgrep -f synthetic_gguf >/dev/null || break; sleep 1; done; ls -la "$W/models"
rows() { # MODEL ROWS TUNING
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] $(POOT_TUNING="$3" timeout 150 "$W/bin/poot" bench "$1" --backend ptx --rows "$2" --prompt-tokens 64 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
M1="$W/models/llama-1b-f16.gguf"; M8="$W/models/llama-8b-q4_k_m.gguf"
echo "== 16 rows: gemv_rows 8 / 16"
for t in "" gemv_rows=16; do rows "$M8" 16 "$t"; done
for t in "" gemv_rows=16; do rows "$M1" 16 "$t"; done
echo "== 64 rows: lib_rows 128 / 64"
for t in "" lib_rows=64; do rows "$M8" 64 "$t"; done
date -u
