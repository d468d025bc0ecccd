#!/usr/bin/env bash
# Call A (fresh machine, carries .bench/c5: release test binaries, poot, greedy_check, profile,
# the gguf wheel): synthetic 1B F16 and 8B Q4_K_M models written in the background; the shared
# suite on PTX (with the late-slot case); the device tests that include PTX (speculation, LoRA,
# guided, sampling, fixture families); then on the 8B model: guided decoding with / without a
# JSON schema, and 16-row decode with gemv_rows 8 / 16 / 32.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s12/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c5/poot.commit
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c5/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
for spec in "8b q4_k_m llama-8b-q4_k_m" "1b f16 llama-1b-f16"; do
  read -r shape kind name <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || (PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1 &)
done
for f in .bench/c5/*.xz; do n="$(basename "$f" .xz)"; xz -dc "$f" >"$W/bin/$n"; chmod +x "$W/bin/$n"; done
echo "== suite on PTX $(date -u +%T)"
timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "^FAIL|^suite:|late slot|rror" | head -20
for tf in speculation: lora:ptx,qwen3 guided:ptx_devices sampling: device_models:; do
  t="${tf%%:*}"; f="${tf#*:}"; f="${f//,/ }"
  echo "== test $t ${f:+(filter $f) }(PTX where it opens) $(date -u +%T)"
  (cd /work/main/crates/poot-llm && timeout 150 "$W/bin/$t" --test-threads 1 $f 2>&1 | grep -E "^test |test result|SKIP|panicked|assert" | head -40)
done
for i in $(seq 1 120); do pgrep -f "synthetic_gguf.py --shape 8b" >/dev/null || break; sleep 1; done
ls -la "$W/models"
guided "$M8" "8B Q4_K_M"
echo "== 8B Q4_K_M, 16 rows: gemv_rows 8 / 16 / 32"
for t in "" gemv_rows=16 gemv_rows=32; do rows "$M8" 16 "$t"; done
date -u
