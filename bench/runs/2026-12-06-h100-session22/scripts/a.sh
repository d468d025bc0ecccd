#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/c22: poot, poot-serve, greedy_check and the sampling
# test at the commit in poot.commit, the gguf wheel, llama.cpp's source): llama.cpp built and
# synthetic SmolLM2-shaped, 1B F16, 8B Q4_K_M and Qwen3-30B-A3B-shaped models written in the
# background; the sampling tests and the shared suite on PTX; per dense model, one row
# contiguous and paged (`poot bench`), poot-serve --parallel 64 started cold and warm (ready
# times), and a lone request's decode speed.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s22/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c22/poot.commit
mkdir -p .bench/c1 && cp .bench/c22/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c22/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py scripts/bench/serve_sweep.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "smollm2-q4_0 smollm2 q4_0" "llama-1b-f16 1b f16" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c22/poot.xz .bench/c22/poot-serve.xz .bench/c22/greedy_check.xz .bench/c22/sampling.xz
echo "== sampling tests on PTX $(date -u +%T)"
timeout 120 "$W/bin/sampling" --test-threads 1 2>&1 | grep -E "^test |SKIP|result|panicked" | head -20
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|expert|passed|rror" | head -40
for spec in "$MS 49152" "$M1 128256" "$M8 128256"; do
  read -r m vocab <<<"$spec"
  [ "$SECONDS" -gt 480 ] && { echo "out of time before $m"; break; }
  wait_model "$m" 200 || continue
  echo "== $(basename "$m") $(date -u +%T)"
  T=100 one "$m"
  T=100 one "$m" --paged
  serve_lone "$m" "$vocab"
done
echo "build: $(tail -1 "$W/build.log")"; ls -la "$W/models"; date -u
