# Sourced by every call of session 30: the work folder that outlives the calls on a warm
# machine, CUDA's libraries, and helpers.
W=/tmp/poot-bench; mkdir -p "$W/bin" "$W/models" "$W/site" "$W/results"
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp POOT_BENCH_DIR="$W"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
unpack() { for f in "$@"; do n="$(basename "$f" .xz)"; [ -x "$W/bin/$n" ] || { xz -dc "$f" >"$W/bin/$n" && chmod +x "$W/bin/$n"; }; done; }
wait_file() { for i in $(seq 1 "${2:-200}"); do [ -f "$1" ] && return 0; sleep 1; done; echo "$1: not there yet"; return 1; }
health() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' "$1" >/dev/null 2>&1; }
save() { mkdir -p "$OUT/results"; cp "$W"/results/*.serve.* "$OUT/results/" 2>/dev/null; true; }
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "poot: $(cat .bench/c56/poot.commit)"
