set -uo pipefail
exec > >(tee -a "$OUT/e.log") 2>&1
source .bench/s24/env.sh
T=150 rows1 "$MQ" 16; T=150 rows1 "$MQ" 64; T=150 rows1 "$MG" 64
for m in "$MQ" "$MG"; do timeout 150 "$W/llama.cpp/build/bin/llama-batched-bench" -m "$m" -ngl 99 -fa on -c 16384 -npp 128 -ntg 64 -npl 16,64 2>&1 | grep -E "^\|" ; done
