#!/usr/bin/env bash
# Session 27, call A: llama.cpp built and the three serving models written in the background;
# poot-serve's cold starts (empty kernel cache, every step variant prepared) as the models
# arrive; then the first model served by both engines.
# Run: bash .bench/s27/a.sh, carry [".bench/s27", ".bench/l26", ".bench/c50"].
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s27/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
if [ ! -x "$W/llama.cpp/build/bin/llama-server" ]; then
  mkdir -p .bench/c1 && cp .bench/l26/llama.cpp.tar.xz .bench/c1/
  (BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s27/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "smollm2-shaped-q4_0 smollm2 q4_0" "llama-1b-f16 1b f16" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c50/poot.xz .bench/c50/poot-serve.xz
cold() { # MODEL: a cold start at --parallel 64, 2048 positions, until every variant is prepared
  local m="$W/models/$1.gguf" name="$2" t0 pid w
  wait_file "$m" 240 || return 1
  t0=$SECONDS
  "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 --parallel 64 --ctx-size 2048 >"$W/results/$name.serve.poot.cold.log" 2>&1 &
  pid=$!
  for i in $(seq 1 900); do health http://127.0.0.1:18080 && break; sleep 0.2; done
  local ready=$((SECONDS - t0)); w=0
  while [ $w -lt 200 ] && ! grep -q "every step variant is prepared" "$W/results/$name.serve.poot.cold.log"; do sleep 1; w=$((w + 1)); done
  echo "$name cold: ready after $ready s, every variant $w s later"
  echo "{\"ready_s\": $ready, \"every_variant_after_ready_s\": $w}" >"$W/results/$name.serve.poot.ready-cold.json"
  grep -E "prepared|engine ready|loaded" "$W/results/$name.serve.poot.cold.log"
  kill $pid; wait $pid 2>/dev/null
}
echo "== cold starts $(date -u +%T)"
cold smollm2-shaped-q4_0 smollm2s-q4_0
cold llama-1b-f16 llama1b-f16
cold llama-8b-q4_k_m llama8b-q4_k_m
save
echo "== build: $(tail -1 "$W/build.log") $(date -u +%T), ${SECONDS} s"
for i in $(seq 1 200); do [ -x "$W/llama.cpp/build/bin/llama-server" ] && break; sleep 1; done
if [ "$SECONDS" -lt 380 ] && [ -x "$W/llama.cpp/build/bin/llama-server" ]; then
  STARTS=warm SERVE_CTX=2048 LOADS="fixed spread" bash bench/h200.sh serve smollm2s-q4_0 && touch "$W/done-smollm2s-q4_0"
fi
save; ls "$W/models"; date -u
