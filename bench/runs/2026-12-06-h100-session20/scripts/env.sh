# Sourced by every call of session 20: the work folder that outlives the calls on a warm
# machine, CUDA's libraries, and helpers.
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site" "$W/results"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp POOT_BENCH_DIR="$W"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M1="$W/models/llama-1b-f16.gguf"; M1Q="$W/models/llama-1b-q4_0.gguf"
M8="$W/models/llama-8b-q4_k_m.gguf"; M8Q="$W/models/llama-8b-q4_0.gguf"; M8F="$W/models/llama-8b-f16.gguf"
MS="$W/models/smollm2-135m-instruct-q4_1.gguf"
unpack() { for f in "$@"; do n="$(basename "$f" .xz)"; [ -x "$W/bin/$n" ] || { xz -dc "$f" >"$W/bin/$n" && chmod +x "$W/bin/$n"; }; done; }
wait_model() { for i in $(seq 1 "${2:-200}"); do [ -f "$1" ] && return 0; sleep 1; done; echo "$1: not written yet"; return 1; }
pp() { # MODEL TUNING KV: prefill and decode of a 512-token prompt, 2 repeats
  echo "$(basename "$1" .gguf) pp512 [${2:-default}] kv ${3:-f16} $(POOT_TUNING="${2:-}" timeout 150 "$W/bin/poot" bench "$1" --backend ptx --kv-type "${3:-f16}" --prompt-tokens 512 --gen-tokens 32 --repeats 2 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
rows() { # MODEL ROWS TUNING KV
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] kv ${4:-f16} $(POOT_TUNING="${3:-}" timeout 200 "$W/bin/poot" bench "$1" --backend ptx --rows "$2" --kv-type "${4:-f16}" --prompt-tokens 128 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
profile() { # MODEL ARGS...
  local m="$1"; shift
  echo "== profile $(basename "$m" .gguf) $* [${POOT_TUNING:-default}]"
  timeout 150 "$W/bin/profile" "$m" --backend ptx --top 16 "$@" 2>&1 | grep -vE "^\s*$" | head -60
}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
rows1() { # MODEL ROWS TUNING: rows with the f32 cache (the default), 1 repeat
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] $(POOT_TUNING="${3:-}" timeout ${T:-200} "${BIN:-$W/bin/poot}" bench "$1" --backend ptx --rows "$2" --prompt-tokens 128 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror|prepared" | tr -s ' ' | tr '\n' ' ')"
}
