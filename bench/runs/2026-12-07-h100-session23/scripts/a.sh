#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/c30: poot, greedy_check and profile at 8f0a617 (the
# grouped expert kernel and the paged row runs), poot at 640fc7f as poot640, the gguf wheel,
# llama.cpp's source). The suite on PTX; 1B F16 paged prefill before and after the row runs;
# the Qwen3-30B-A3B-shaped model before and after the grouped kernel, where its decode and
# prefill time goes, and llama-bench beside it.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s23/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
echo "poot: $(cat .bench/c30/poot.commit), poot640: 640fc7f"
mkdir -p .bench/c1 && cp .bench/c30/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c30/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c30/poot.xz .bench/c30/poot640.xz .bench/c30/greedy_check.xz .bench/c30/profile.xz
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|grouped|paged|passed|rror" | head -30
wait_model "$M1" 120 && for b in poot640 poot; do BIN="$W/bin/$b"; echo "[$b]"; T=100 one "$M1"; T=100 one "$M1" --paged; done
wait_model "$MQ" 240 && ls -la "$MQ"
for b in poot640 poot; do
  echo "== $b 30B $(date -u +%T)"
  timeout 200 "$W/bin/$b" bench "$MQ" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 2>&1 | tail -11
done
echo "== profile decode $(date -u +%T)"
timeout 100 "$W/bin/profile" "$MQ" --backend ptx --kv-f16 --capacity 1024 --position 576 --reps 3 --top 24 2>&1 | tail -34
echo "== profile prefill 512 $(date -u +%T)"
timeout 100 "$W/bin/profile" "$MQ" --backend ptx --kv-f16 --prefill 512 --capacity 1024 --reps 2 --top 16 2>&1 | tail -26
for i in $(seq 1 150); do [ -x "$LB" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
echo "== llama-bench $(date -u +%T)"
[ -x "$LB" ] && timeout 150 "$LB" -m "$MQ" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -4
date -u
