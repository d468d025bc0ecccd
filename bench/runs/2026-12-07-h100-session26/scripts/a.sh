#!/usr/bin/env bash
# Session 26, call A (poot alone): where the MoE shapes' time goes at c945351. Decode and
# 512-token prefill profiles of the gpt-oss-20b shape (6 layers) and the Qwen3-30B-A3B shape
# (12 layers), and Nsight Compute on their expert kernels.
# Run: bash .bench/s26/a.sh, carry [".bench/s26", ".bench/c47"].
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s26/env.sh
export POOT_PTX_COMPILE_THREADS=0
echo "poot: $(cat .bench/c47/poot.commit)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s26/gguf-*.whl
MQ="$W/models/qwen3-30b-a3b-12l.gguf"; MG="$W/models/gpt-oss-20b-6l.gguf"
for spec in "gpt-oss-20b mxfp4 6 $MG" "30b-a3b q4_k_m 12 $MQ"; do read -r shape kind layers out <<<"$spec"
  (PYTHONPATH="$W/site" setsid nohup python3 scripts/bench/synthetic_gguf.py --shape "$shape" --type "$kind" --layers "$layers" -q -o "$out.tmp" >"$out.log" 2>&1 && mv "$out.tmp" "$out" &)
done
unpack .bench/c47/poot.xz .bench/c47/profile.xz
P="$W/bin/profile"
wait_model "$MG" 90
echo "== gpt-oss 6l decode profile $(date -u +%T)"
timeout 120 "$P" "$MG" --backend ptx --kv-f16 --capacity 1024 --position 512 --reps 3 --top 16 2>&1 | grep -vE "^(loaded|layout|device)" | head -48
echo "== gpt-oss 6l ncu decode gemv $(date -u +%T)"
timeout 120 ncu --clock-control none -k regex:gemv --launch-skip 0 -c 10 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  "$P" "$MG" --backend ptx --kv-f16 --capacity 1024 --position 512 --reps 1 --tokens 2 2>&1 \
  | grep -E "  [a-z_]+[0-9]+.*\(|Duration|DRAM Through|Memory Through|L1/TEX Hit|L2 Hit|Registers|Achieved Occ|Theoretical Occ|Block Size|Grid Size|Dynamic Shared|Warp Cycles Per Issued|Stall|OPT" | cut -c1-180 | head -150
wait_model "$MQ" 60
for m in "$MG" "$MQ"; do
  echo "== $(basename $m) prefill 512 profile $(date -u +%T)"
  timeout 150 "$P" "$m" --backend ptx --kv-f16 --prefill 512 --capacity 1024 --reps 3 --top 12 2>&1 | grep -vE "^(loaded|layout|device)" | head -20
  echo "== $(basename $m) ncu routed_gemm prefill $(date -u +%T)"
  timeout 150 ncu --clock-control none -k regex:routed_gemm --launch-skip 0 -c 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    "$P" "$m" --backend ptx --kv-f16 --prefill 512 --capacity 1024 --reps 1 2>&1 \
    | grep -E "  [a-z_]+[0-9]+.*\(|Duration|DRAM Through|Memory Through|Compute \(SM\)|L1/TEX Hit|L2 Hit|Registers|Achieved Occ|Theoretical Occ|Block Size|Grid Size|Dynamic Shared|Warp Cycles Per Issued|Stall|Pipe|OPT" | cut -c1-180 | head -80
done
date -u
