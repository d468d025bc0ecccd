#!/usr/bin/env bash
# Session 25, call A: poot at .bench/c45 (routed contractions tiled over each expert's rows,
# routed_tiles=64 by default) beside the grouped kernel (routed_tiles=0) in the same binary,
# and llama.cpp built in the background for llama-bench / llama-batched-bench beside it.
# Run: bash .bench/s25/a.sh, carry [".bench/s25", ".bench/c45"].
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s25/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
echo "poot: $(cat .bench/c45/poot.commit)"
if [ ! -x "$LB" ]; then
  mkdir -p .bench/c1 && cp .bench/c45/llama.cpp.tar.xz .bench/c1/
  (BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c45/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py scripts/bench/serve_sweep.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" "gpt-oss-20b-mxfp4 gpt-oss-20b mxfp4" >/dev/null 2>&1 &)
unpack .bench/c45/poot.xz .bench/c45/greedy_check.xz
echo "== suite on PTX $(date -u +%T)"
timeout 170 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
ab() { echo "$(basename "$2" .gguf) [${1:-default}] $(POOT_TUNING="$1" timeout ${T:-60} "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
for m in "$MQ" "$MG"; do
  wait_model "$m" 240 || continue
  echo "== $(basename "$m") $(date -u +%T)"
  T=120 R=2 ab "" "$m"; ab "routed_tiles=0" "$m"
done
wait_model "$MQ" 10 && { T=90 rows1 "$MQ" 64; T=90 rows1 "$MQ" 64 routed_tiles=0; T=90 rows1 "$MQ" 16; T=90 rows1 "$MQ" 16 routed_tiles=0; }
echo "build: $(tail -1 "$W/build.log") $(date -u +%T)"
for m in "$MQ" "$MG"; do
  [ -x "$LB" ] && [ -f "$m" ] && timeout 100 "$LB" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -4
done
date -u
