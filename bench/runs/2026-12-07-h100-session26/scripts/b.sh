#!/usr/bin/env bash
# Session 26, call B: the shared suite on PTX at the new commit (MXFP4 units from words in the
# tiles and the decode kernel, sinks on the matrix-unit attention, row kernels cut into parts
# for rows that are not whole strides), then the new binary beside c945351 (.bench/c47) in
# the same call on the cut MoE shapes. llama.cpp is built and the full shapes are written in
# the background for call C on the same machine.
# Run: bash .bench/s26/b.sh, carry [".bench/s26", ".bench/l26", ".bench/c48", ".bench/o47"].
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s26/env.sh
export POOT_PTX_COMPILE_THREADS=0
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
echo "poot: $(cat .bench/c48/poot.commit), baseline c945351"
if [ ! -x "$LB" ]; then
  mkdir -p .bench/c1 && cp .bench/l26/llama.cpp.tar.xz .bench/c1/
  (BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s26/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py scripts/bench/serve_sweep.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind layers <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" ${layers:+--layers $layers} -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "gpt-oss-20b-6l gpt-oss-20b mxfp4 6" "qwen3-30b-a3b-12l 30b-a3b q4_k_m 12" "gpt-oss-20b-mxfp4 gpt-oss-20b mxfp4" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c48/poot.xz .bench/c48/greedy_check.xz .bench/o47/poot-c945351.xz
echo "== suite on PTX $(date -u +%T)"
timeout 170 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
ab() { # BIN TUNING MODEL
  echo "$(basename "$3" .gguf) [$1 ${2:-default}] $(POOT_TUNING="$2" timeout ${T:-60} "$W/bin/$1" bench "$3" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
MG6="$W/models/gpt-oss-20b-6l.gguf"; MQ12="$W/models/qwen3-30b-a3b-12l.gguf"
wait_model "$MG6" 60 && { echo "== $(date -u +%T)"; ab poot "" "$MG6"; ab poot-c945351 "" "$MG6"; ab poot attn_mma_sinks=0 "$MG6"; ab poot "" "$MG6"; }
wait_model "$MQ12" 60 && { echo "== $(date -u +%T)"; ab poot "" "$MQ12"; ab poot-c945351 "" "$MQ12"; }
echo "build: $(tail -1 "$W/build.log") $(date -u +%T)"; ls "$W/models"
date -u
