#!/usr/bin/env bash
# Session 30, call A (fresh machine): the device wait's change measured (poot at ce79ee5, before
# it, against this commit in one call: `poot bench`, one SmolLM2-shaped row, contiguous and paged);
# decode_positions=8 against the default; a lone request served at --parallel 64 and 1 (SmolLM2
# shape and 1B F16, lone_vs_bench); the prompt attention's causal bound (attn_bound=0 against
# the default) and the shared suite on PTX with it; whether NVIDIA's Vulkan driver runs with the loader carried in.
# Run: bash .bench/s30/a.sh, carry [".bench/s30", ".bench/c56", ".bench/c56v", ".bench/o52", ".gl"].
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s30/env.sh
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
echo "vulkan loader: $(ldconfig -p | grep -c 'libvulkan.so')"
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d 2>&1 | head
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s30/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py scripts/bench/serve_sweep.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "smollm2-shaped-q4_0 smollm2 q4_0" "llama-1b-f16 1b f16" >/dev/null 2>&1 &)
unpack .bench/c56/poot.xz .bench/c56/poot-serve.xz .bench/c56v/greedy_check.xz
xz -dc .bench/o52/poot.xz >"$W/bin/poot-old" && chmod +x "$W/bin/poot-old"
export POOT_PTX_COMPILE_THREADS=0
MS="$W/models/smollm2-shaped-q4_0.gguf"; M1="$W/models/llama-1b-f16.gguf"
lone() { # BIN BACKEND MODEL FLAGS..: one row, 512 + 128 tokens, 3 repeats
  local bin="$1" be="$2" m="$3"; shift 3
  echo "$(basename "$m" .gguf) [$bin $be ${POOT_TUNING:-}] $* $(timeout ${T:-90} "$W/bin/$bin" bench "$m" --backend "$be" --prompt-tokens 512 --gen-tokens 128 --repeats 3 "$@" 2>&1 | grep -E "^(prefill|decode) |rror|anick" | tr -s ' ' | tr '\n' ' ')"
}
wait_file "$MS" 60
echo "== lone $(date -u +%T)"
for round in 1 2; do
  for bin in poot-old poot; do lone $bin ptx "$MS"; lone $bin ptx "$MS" --paged --capacity 2048; done
  [ $round = 2 ] && break
  lone poot ptx "$MS" --capacity 2048; POOT_TUNING=attn_bound=0 lone poot ptx "$MS" --paged --capacity 2048
  POOT_TUNING=decode_positions=8 lone poot ptx "$MS"; POOT_TUNING=decode_positions=8 lone poot ptx "$MS" --paged --capacity 2048
done
echo "== vulkan probe $(date -u +%T)"
VK="$(T=60 lone poot vulkan "$MS")"; echo "$VK"
case "$VK" in *"decode "*) vk=1 ;; *) vk= ;; esac
echo "== suite on PTX $(date -u +%T)"; timeout 150 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20
served() { # MODEL NAME FLAGS..: poot-serve, one client, once every variant is prepared
  local m="$1" name="$2" pid w=0; shift 2
  "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 "$@" >"$W/results/$name.serve.log" 2>&1 &
  pid=$!
  for i in $(seq 1 900); do health http://127.0.0.1:18080 && break; sleep 0.2; done
  while [ $w -lt 45 ] && ! grep -q "every step variant is prepared" "$W/results/$name.serve.log"; do sleep 1; w=$((w + 1)); done
  echo "$name: every variant $w s after ready"
  python3 "$W/scripts/serve_sweep.py" --url http://127.0.0.1:18080 --vocab "$VOCAB" --concurrency 1 \
    --load fixed --min-requests 8 --label "poot $name" --json "$W/results/$name.fixed.serve.json" 2>&1 | tail -1
  kill $pid; wait $pid 2>/dev/null
}
echo "== served, one client $(date -u +%T)"
VOCAB=49152 served "$MS" smol-p64 --parallel 64 --ctx-size 2048
VOCAB=49152 served "$MS" smol-p1-paged --parallel 1 --ctx-size 2048 --kv-blocks 128
[ $SECONDS -lt 430 ] && wait_file "$M1" 60 && { echo "== 1B $(date -u +%T)"; lone poot ptx "$M1"; lone poot ptx "$M1" --capacity 2048; lone poot ptx "$M1" --paged --capacity 2048; POOT_TUNING=attn_bound=0 lone poot ptx "$M1" --paged --capacity 2048; POOT_TUNING=decode_positions=8 lone poot ptx "$M1"
  VOCAB=128256 served "$M1" 1b-p64 --parallel 64 --ctx-size 2048; lone poot ptx "$M1"; }
save
echo "== suite on vulkan $(date -u +%T)"
[ -n "$vk" ] && [ $SECONDS -lt 450 ] && timeout 120 "$W/bin/greedy_check" vulkan --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick|adapter|device" | head -20
echo "== suite on wgpu $(date -u +%T)"
[ -n "$vk" ] && [ $SECONDS -lt 420 ] && timeout 100 "$W/bin/greedy_check" wgpu --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick|adapter|device" | head -20
[ -n "$vk" ] && [ $SECONDS -lt 480 ] && { echo "== speed on vulkan, wgpu $(date -u +%T)"; T=40 lone poot vulkan "$M1"; T=60 lone poot wgpu "$MS"; }
[ $SECONDS -lt 440 ] && { echo "== suite on PTX, decode_positions=8 $(date -u +%T)"; POOT_TUNING=decode_positions=8 timeout 120 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror|panick" | head -20; }
save
date -u; echo "${SECONDS} s"
