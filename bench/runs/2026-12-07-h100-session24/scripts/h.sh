#!/usr/bin/env bash
# Session 24, call H (poot alone, little device time left): HEAD's binaries (.bench/c41) beside
# poot at d4805e4 (.bench/c43) in the same call, on MoE shapes cut to fewer layers
# (synthetic_gguf.py --layers) so they are written in seconds. The shared suite on PTX; the
# 30B-A3B shape (12 layers) and the gpt-oss-20b shape (6 layers) with both binaries; two A/Bs.
# Run: bash .bench/s24c/h.sh, carry [".bench/s24", ".bench/s24c", ".bench/c41", ".bench/c43"].
set -uo pipefail
exec > >(tee -a "$OUT/h.log") 2>&1
source .bench/s24/env.sh
export POOT_PTX_COMPILE_THREADS=0
echo "poot: $(cat .bench/c41/poot.commit), baseline d4805e4"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c43/gguf-*.whl
MQ="$W/models/qwen3-30b-a3b-12l.gguf"; MG="$W/models/gpt-oss-20b-6l.gguf"
for spec in "30b-a3b q4_k_m 12 $MQ" "gpt-oss-20b mxfp4 6 $MG"; do read -r shape kind layers out <<<"$spec"
  (PYTHONPATH="$W/site" setsid nohup python3 scripts/bench/synthetic_gguf.py --shape "$shape" --type "$kind" --layers "$layers" -q -o "$out.tmp" >"$out.log" 2>&1 && mv "$out.tmp" "$out" &)
done
unpack .bench/c41/poot.xz .bench/c41/greedy_check.xz .bench/c43/poot-d4805e4.xz
echo "== suite on PTX $(date -u +%T)"
timeout 100 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror" | head -20
one2() { echo "$(basename "$2" .gguf) [$1] $(timeout 50 "$W/bin/$1" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
ab() { echo "[$1] $(POOT_TUNING="$1" timeout 40 "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
wait_model "$MG" 90 && { echo "== $(date -u +%T)"; one2 poot "$MG"; one2 poot-d4805e4 "$MG"; }
wait_model "$MQ" 90 && { echo "== $(date -u +%T)"; one2 poot "$MQ"; one2 poot-d4805e4 "$MQ"; ab "group_rows=16,block_resident=2" "$MQ"; ab "decode_group_lone=1" "$MQ"; }
date -u
