#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/c21: poot, poot-serve, profile, greedy_check at the
# commit in poot.commit, the gguf wheel; .bench/q0: llama.cpp's source): llama.cpp built and the
# synthetic models written in the background; the shared suite on PTX (units along each column,
# the default since 5bb0693); one row contiguous against paged on 1B F16 (the lone request's
# gap); Nsight Compute on the 1B Q4_K_M 16-row step's block tiles and on paged decode attention.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s21/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c21/poot.commit
mkdir -p .bench/c1 && cp .bench/q0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c21/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-q4_k_m 1b q4_k_m" "llama-1b-f16 1b f16" "llama-8b-q4_0 8b q4_0" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c21/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 220 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts|rror" | head -40
wait_model "$M1K" 100
echo "== 1B Q4_K_M rows 16: L2 hints ahead (tile_ahead) $(date -u +%T)"
T=150 rows1 "$M1K" 16 ""
for a in 256 512 1024; do T=90 rows1 "$M1K" 16 tile_ahead=$a; done
T=60 rows1 "$M1K" 16 ""
echo "== ncu 1B Q4_K_M 16 rows, block tiles $(date -u +%T)"
timeout 200 ncu --clock-control none -k regex:gemm_split --launch-skip 0 -c 4 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  "$W/bin/profile" "$M1K" --backend ptx --rows 16 --paged --kv-f16 --capacity 1024 --position 576 --reps 1 --tokens 2 2>&1 \
  | grep -E "k_gemm|Duration|DRAM Through|Memory Through|Issue Slots|Registers|Occupancy|Stall|stall|Shared Memory Config|Block Limit|Warp Cycles|Eligible|No Eligible|Active Warps|Dynamic Shared|Static Shared|L2 Hit|L1/TEX Hit|OPT|INF" | cut -c1-200 | head -120
wait_model "$M1" 100
echo "== one row, contiguous and paged $(date -u +%T)"
T=150 one "$M1"
T=100 one "$M1" --paged
echo "== ncu paged decode attention, 1B F16 one row $(date -u +%T)"
for p in "" --paged; do
timeout 90 ncu --clock-control none -k regex:attention --launch-skip 0 -c 4 --section SpeedOfLight --section WarpStateStats --section Occupancy \
  "$W/bin/profile" "$M1" --backend ptx --kv-f16 $p --capacity 1024 --position 576 --reps 1 --tokens 2 2>&1 \
  | grep -E "k_attention|Duration|DRAM Through|Issue Slots|Registers|Achieved Occ|Stall|stall|Warp Cycles|OPT" | cut -c1-200 | head -40
done
date -u
