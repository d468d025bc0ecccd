# Sourced by every call of session 21: the work folder that outlives the calls on a warm
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
