#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/c12: poot, profile, greedy_check with block tiles staged
# as packed f16 pairs in two sets of slices, the gguf wheel; .bench/q0: llama.cpp's source):
# llama.cpp built and the synthetic models written in the background; the shared suite on PTX;
# 8B Q4_K_M rows 16: defaults, tile_buffers=1; then rows 16 beside llama-batched-bench.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s19/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c12/poot.commit
mkdir -p .bench/c1 && cp .bench/q0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c12/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cp -r bench "$W/bench-scripts"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" "llama-1b-q4_0 1b q4_0" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_0 8b q4_0" >/dev/null 2>&1 &)
unpack .bench/c12/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts" | head -40
wait_model "$M8" 200 && sleep 2
for t in "" tile_buffers=1; do rows1 "$M8" 16 "$t"; done
for i in $(seq 1 100); do [ -x "$W/llama.cpp/build/bin/llama-batched-bench" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
ROWS=16 BR=1 ROWS_SECONDS=150 timeout 200 bash bench/h200.sh batched llama8b-q4_k_m 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
(cd "$W/results" && tar czf "$OUT/batched-a.tar.gz" *rows* *batched* 2>/dev/null)
ls -la "$W/models"; date -u
ROWS=16 BR=1 ROWS_SECONDS=170 timeout 230 bash bench/h200.sh batched llama1b-q4_0 2>&1 | grep -E "^==|S_TG|decode|rror|failed" | head -30
(cd "$W/results" && tar czf "$OUT/batched-a2.tar.gz" *rows* *batched* 2>/dev/null); date -u
