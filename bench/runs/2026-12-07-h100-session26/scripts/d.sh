#!/usr/bin/env bash
# Session 26, call D (a fresh machine): the shared suite on PTX at the session's last commit,
# a decode profile of the cut gpt-oss shape, then both full MoE shapes by poot and by
# llama-bench (pp512, tg128) in the same call, llama.cpp built in the background.
# Run: bash .bench/s26/d.sh, carry [".bench/s26", ".bench/l26", ".bench/c49", ".bench/p49"].
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s26/env.sh
export POOT_PTX_COMPILE_THREADS=0
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
echo "poot: $(cat .bench/c49/poot.commit)"
if [ ! -x "$LB" ]; then
  mkdir -p .bench/c1 && cp .bench/l26/llama.cpp.tar.xz .bench/c1/
  (BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s26/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind layers <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" ${layers:+--layers $layers} -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "gpt-oss-20b-6l gpt-oss-20b mxfp4 6" "gpt-oss-20b-mxfp4 gpt-oss-20b mxfp4" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c49/poot.xz .bench/c49/greedy_check.xz .bench/p49/profile.xz
echo "== suite on PTX $(date -u +%T)"
timeout 170 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
MG6="$W/models/gpt-oss-20b-6l.gguf"
wait_model "$MG6" 30 && { echo "== gpt-oss 6l decode profile $(date -u +%T)"
timeout 60 "$W/bin/profile" "$MG6" --backend ptx --kv-f16 --capacity 1024 --position 512 --reps 3 --top 10 2>&1 | grep -vE "^(loaded|layout|device)" | sed -n 1,18p; }
ab() { echo "$(basename "$2" .gguf) [${1:-default}] $(POOT_TUNING="$1" timeout ${T:-60} "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
for m in "$MG" "$MQ"; do
  wait_model "$m" 240 || continue
  echo "== $(basename "$m") $(date -u +%T)"
  T=120 R=2 ab "" "$m"
  for i in $(seq 1 150); do [ -x "$LB" ] && break; sleep 2; done
  echo "build: $(tail -1 "$W/build.log") $(date -u +%T)"
  [ -x "$LB" ] && timeout 100 "$LB" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | grep -E "^\|"
done
date -u
