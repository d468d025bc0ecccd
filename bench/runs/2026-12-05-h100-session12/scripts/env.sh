# Sourced by every call of session 12: the work folder that outlives the calls on a warm
# machine, CUDA's libraries, and helpers.
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M1="$W/models/llama-1b-f16.gguf"; M8="$W/models/llama-8b-q4_k_m.gguf"
MS="$W/models/smollm2-135m-instruct-q4_1.gguf"
rows() { # MODEL ROWS TUNING
  echo "$(basename "$1" .gguf) rows $2 [${3:-default}] $(POOT_TUNING="$3" timeout 120 "$W/bin/poot" bench "$1" --backend ptx --rows "$2" --prompt-tokens 64 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
}
guided() { # MODEL LABEL [--chat]: two rounds of a JSON-schema answer and an unconstrained one
  local m="$1" label="$2"; shift 2
  echo "== $label: guided decoding (JSON schema) / unconstrained, 256 tokens at most"
  for i in 1 2; do
    echo "[schema] $(timeout 100 "$W/bin/poot" run "$m" --backend ptx --max-new 256 -v "$@" --json-schema bench/prompts/guided-schema.json "$(cat bench/prompts/guided.txt)" 2>&1 >/dev/null | grep -E "tok/s|guided|rror" | tr '\n' ' ')"
    echo "[free] $(timeout 100 "$W/bin/poot" run "$m" --backend ptx --max-new 256 -v "$@" --ignore-eos "$(cat bench/prompts/guided.txt)" 2>&1 >/dev/null | grep -E "tok/s|rror" | tr '\n' ' ')"
  done
}
profile() { # MODEL [--paged]
  echo "== profile $(basename "$1" .gguf) ${2:-}"
  timeout 120 "$W/bin/profile" "$1" --backend ptx --capacity 640 --position 576 --top 14 ${2:-} 2>&1 | grep -vE "^\s*$" | head -40
}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
