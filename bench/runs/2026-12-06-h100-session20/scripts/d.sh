#!/usr/bin/env bash
# Call D (fresh machine; carries .bench/c14: poot and greedy_check at the commit in
# poot.commit, the gguf wheel; .bench/c13a: poot at 581ae44): the shared suite on PTX; 8B Q4_K_M
# rows 16 with 581ae44 (tile_prefetch=0) and with this commit, prefetch off then on; 1B Q4_0 rows
# 16, prefetch off then on. Same command (rows1) for every run.
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s20/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c14/poot.commit
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c14/gguf-*.whl
mkdir -p "$W/scripts" "$W/old" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
xz -dc .bench/c13a/poot.xz >"$W/old/poot" && chmod +x "$W/old/poot"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" "llama-1b-q4_0 1b q4_0" >/dev/null 2>&1 &)
unpack .bench/c14/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts" | head -40
wait_model "$M8" 200 && sleep 2
echo "== rows $(date -u +%T)"
T=280 rows1 "$M8" 16 ""
BIN="$W/old/poot" T=150 rows1 "$M8" 16 tile_prefetch=0
T=100 rows1 "$M8" 16 tile_prefetch=1
[ "$SECONDS" -lt 430 ] && T=$((560 - SECONDS)) rows1 "$M1Q" 16 ""
[ "$SECONDS" -lt 520 ] && T=$((575 - SECONDS)) rows1 "$M1Q" 16 tile_prefetch=1
date -u
