#!/usr/bin/env bash
# Call C (fresh or warm; carries .bench/c21 at 649c207: index checks and unflattened indices
# declared once per block): the shared suite on PTX; one row decoding contiguous and over the
# serving steps' paged cache (`--paged`) on 1B F16 and 8B Q4_K_M; 1B Q4_K_M at 16 rows.
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s21/env.sh
cat .bench/c21/poot.commit
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c21/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" "llama-1b-q4_k_m 1b q4_k_m" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
rm -f "$W/bin/poot" "$W/bin/profile" "$W/bin/greedy_check"; unpack .bench/c21/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 220 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts|rror" | head -40
wait_model "$M1" 100
echo "== one row, contiguous and paged $(date -u +%T)"
T=150 one "$M1"
T=100 one "$M1" --paged
wait_model "$M1K" 30
[ "$SECONDS" -lt 330 ] && T=120 rows1 "$M1K" 16 ""
if [ "$SECONDS" -lt 330 ] && wait_model "$M8" 30; then
  T=130 one "$M8"
  [ "$SECONDS" -lt 470 ] && T=$((590 - SECONDS)) one "$M8" --paged
fi
date -u
