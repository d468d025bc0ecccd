#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/c13a: poot and greedy_check at the commit in
# poot.commit, the gguf wheel; .bench/c12p: poot at 58edcab; .bench/q0: llama.cpp's source):
# llama.cpp built and the synthetic models written in the background; the shared suite on PTX;
# 8B Q4_K_M rows 16: defaults, then tile_prefetch=0; 1B Q4_0 rows 16 if there is time.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s20/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c13a/poot.commit
mkdir -p .bench/c1 && cp .bench/q0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c13a/gguf-*.whl
mkdir -p "$W/scripts" "$W/old" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
xz -dc .bench/c12p/poot.xz >"$W/old/poot" && chmod +x "$W/old/poot"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" "llama-1b-q4_0 1b q4_0" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_0 8b q4_0" >/dev/null 2>&1 &)
unpack .bench/c13a/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts" | head -40
wait_model "$M8" 200 && sleep 2
echo "== rows $(date -u +%T)"
T=300 rows1 "$M8" 16 ""
T=200 rows1 "$M8" 16 tile_prefetch=0
[ "$SECONDS" -lt 430 ] && T=$((540 - SECONDS)) rows1 "$M1Q" 16 ""
date -u
