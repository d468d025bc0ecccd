# Sourced by every call of session 26: the work folder that outlives the calls on a warm
# machine, CUDA's libraries, and helpers.
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site" "$W/results"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp POOT_BENCH_DIR="$W"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
M1="$W/models/llama-1b-f16.gguf"; M1Q="$W/models/llama-1b-q4_0.gguf"; M1K="$W/models/llama-1b-q4_k_m.gguf"
M8="$W/models/llama-8b-q4_k_m.gguf"; M8Q="$W/models/llama-8b-q4_0.gguf"; M8F="$W/models/llama-8b-f16.gguf"
unpack() { for f in "$@"; do n="$(basename "$f" .xz)"; [ -x "$W/bin/$n" ] || { xz -dc "$f" >"$W/bin/$n" && chmod +x "$W/bin/$n"; }; done; }
wait_model() { for i in $(seq 1 "${2:-200}"); do [ -f "$1" ] && return 0; sleep 1; done; echo "$1: not written yet"; return 1; }
rows1() { # MODEL ROWS TUNING: rows with the default cache, 1 repeat
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] $(POOT_TUNING="${3:-}" timeout ${T:-200} "${BIN:-$W/bin/poot}" bench "$1" --backend ptx --rows "$2" --prompt-tokens 128 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror|prepared" | tr -s ' ' | tr '\n' ' ')"
}
one() { # MODEL EXTRA...: one row, 2 repeats
  local m="$1"; shift
  echo "$(basename "$m" .gguf) one row $* [${POOT_TUNING:-default}] $(timeout ${T:-200} "${BIN:-$W/bin/poot}" bench "$m" --backend ptx --prompt-tokens 512 --gen-tokens 128 --repeats 2 "$@" 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
MS="$W/models/smollm2-q4_0.gguf"
serve_lone() { # MODEL VOCAB: ready times (cold, warm) at --parallel 64, then a lone request
  local m="$1" name; name="$(basename "$1" .gguf)"
  for start in cold warm; do
    local t0=$SECONDS
    "$W/bin/poot-serve" --model "$m" --backend ptx --port 18080 --parallel 64 --ctx-size 1024 >"$OUT/$name.serve.$start.log" 2>&1 &
    local pid=$! ok=0
    for i in $(seq 1 600); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18080/health", timeout=2)' >/dev/null 2>&1 && { ok=1; break; }; sleep 0.2; done
    echo "$name: poot-serve --parallel 64 $start: ready=$ok after $((SECONDS - t0)) s"
    grep -E "prepared|ready|loaded|took" "$OUT/$name.serve.$start.log" | head -8
    if [ $start = warm ]; then
      for w in $(seq 1 60); do grep -q "every step variant is prepared" "$OUT/$name.serve.warm.log" && break; sleep 1; done
      echo "$name: variants prepared ${w} s after ready"
      timeout 200 python3 scripts/bench/serve_sweep.py --url http://127.0.0.1:18080 --vocab "$2" --concurrency 1 --min-requests 3 --label poot --json "$OUT/$name.lone.json"
    fi
    kill $pid; wait $pid 2>/dev/null
  done
}
MQ="$W/models/qwen3-30b-a3b-q4_k_m.gguf"
LB="$W/llama.cpp/build/bin/llama-bench"
MG="$W/models/gpt-oss-20b-mxfp4.gguf"
