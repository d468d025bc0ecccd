#!/usr/bin/env bash
# Call E (fresh machine; carries .bench/c11: poot with the left side computed once, splits for four
# workgroups a multiprocessor and 64 registers a thread; .bench/q0: llama.cpp source): setup as
# in call A; the shared suite on PTX; 1B Q4_0 rows: defaults, tile_resident=0, block_tiles=0,
# lib_rows=16.
set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s18/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
cat .bench/c11/poot.commit
mkdir -p .bench/c1 && cp .bench/q0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c11/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-q4_0 1b q4_0" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" "llama-8b-q4_0 8b q4_0" >/dev/null 2>&1 &)
unpack .bench/c11/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 240 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|two parts" | head -40
wait_model "$M1Q" 100 && sleep 2
for t in "" tile_resident=0 block_tiles=0 lib_rows=16 block_wgs=8; do rows1 "$M1Q" 16 "$t"; done
for t in "" lib_rows=16; do rows1 "$M1Q" 64 "$t"; done
ls -la "$W/models"; echo "build: $(tail -1 "$W/build.log")"; date -u
