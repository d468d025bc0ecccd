#!/usr/bin/env bash
# Call H (fresh machine, carries .bench/c5: release test binaries built on the development
# machine, poot, and the gguf wheel): the device tests that include PTX where it opens
# (speculative decoding, LoRA, guided decoding, sampling, fixture families), then 16-row decode
# A/B on the 8B Q4_K_M model with gemv_rows 8 (default) / 16 if time is left. Everything is
# written to $OUT/h.log as it happens (the call may be cut off by the device budget).
set -uo pipefail
exec > >(tee -a "$OUT/h.log") 2>&1
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat .bench/c5/poot.commit
# The test binaries find their fixtures under the path they were built at.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c5/gguf-*.whl
M8="$W/models/llama-8b-q4_k_m.gguf"
(PYTHONPATH="$W/site" nice python3 scripts/bench/synthetic_gguf.py --shape 8b --type q4_k_m -q -o "$M8" >"$W/m8.log" 2>&1 &)
for f in .bench/c5/*.xz; do n="$(basename "$f" .xz)"; xz -dc "$f" >"$W/bin/$n"; chmod +x "$W/bin/$n"; done
# name:filter (the LoRA and guided binaries' PTX tests only; the others run whole).
for tf in speculation: lora:ptx guided:ptx_devices sampling: device_models:; do
  t="${tf%%:*}"; f="${tf#*:}"
  echo "== test $t ${f:+(filter $f) }(PTX where it opens) $(date -u +%T)"
  (cd /work/main/crates/poot-llm && timeout 60 "$W/bin/$t" --test-threads 1 $f 2>&1 | grep -E "^test |test result|SKIP|panicked|assert" | head -40)
done
for i in $(seq 1 60); do pgrep -f synthetic_gguf >/dev/null || break; sleep 1; done
echo "== 8B Q4_K_M, 16 rows: gemv_rows 8 / 16"
for t in "" gemv_rows=16; do
  echo "[${t:-default}] $(POOT_TUNING="$t" timeout 100 "$W/bin/poot" bench "$M8" --backend ptx --rows 16 --prompt-tokens 32 --gen-tokens 32 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
done
date -u
