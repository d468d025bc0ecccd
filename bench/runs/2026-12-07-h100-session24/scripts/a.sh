#!/usr/bin/env bash
# Prepared at the end of session 23 (binaries in .bench/c40 at the commit in poot.commit, built
# from main d4805e4). Call A: llama.cpp built and the 30B-A3B and gpt-oss-20b models written in the
# background; the suite on PTX with the defaults and with paged_runs=1; 1B F16 paged prefill
# with and without the row runs; the 30B model and gpt-oss-20b (poot bench, profile), and
# llama-bench beside both. Run: bash .bench/s24/a.sh, carry [".bench/s24", ".bench/c40"];
# drop poot-serve.xz from c40 if the tree is over 64 MiB.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s24/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
echo "poot: $(cat .bench/c40/poot.commit)"
if [ ! -x "$LB" ]; then
  mkdir -p .bench/c1 && cp .bench/c40/llama.cpp.tar.xz .bench/c1/
  (BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c40/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || { PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.tmp" >"$W/$name.log" 2>&1 && mv "$W/models/$name.tmp" "$W/models/$name.gguf"; }
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" "qwen3-30b-a3b-q4_k_m 30b-a3b q4_k_m" "gpt-oss-20b-mxfp4 gpt-oss-20b mxfp4" >/dev/null 2>&1 &)
unpack .bench/c40/poot.xz .bench/c40/greedy_check.xz .bench/c40/profile.xz
echo "== suite on PTX $(date -u +%T)"
timeout 150 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|passed|rror" | head -20
echo "== suite on PTX, paged_runs=1 $(date -u +%T)"
POOT_TUNING=paged_runs=1 timeout 150 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "FAIL|paged|passed|rror" | head -20
wait_model "$M1" 120 && { T=100 one "$M1" --paged; POOT_TUNING=paged_runs=1 T=100 one "$M1" --paged; }
for m in "$MQ" "$MG"; do
  wait_model "$m" 200 || continue
  echo "== $(basename "$m") $(date -u +%T)"
  timeout 150 "$W/bin/poot" bench "$m" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 2>&1 | tail -11
  timeout 100 "$W/bin/profile" "$m" --backend ptx --kv-f16 --capacity 1024 --position 576 --reps 3 --top 20 2>&1 | grep -vE "^(loaded|layout|device)" | tail -40
done
for i in $(seq 1 150); do [ -x "$LB" ] && break; sleep 2; done
echo "build: $(tail -1 "$W/build.log")"
for m in "$MQ" "$MG"; do
  [ -x "$LB" ] && [ -f "$m" ] && timeout 120 "$LB" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | tail -4
done
date -u
