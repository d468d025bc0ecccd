set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s24/env.sh
unpack .bench/s24b/poot-serve.xz
for th in 1 0; do rm -rf "$W/cache"; t0=$(date +%s.%N); POOT_PTX_COMPILE_THREADS=$th timeout 200 "$W/bin/poot" bench "$M1" --backend ptx --prompt-tokens 128 --gen-tokens 16 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror"; echo "compile threads $th: total $(echo "$(date +%s.%N) - $t0" | bc) s"; done
for th in 1 0; do rm -rf "$W/cache"; t0=$(date +%s.%N); POOT_PTX_COMPILE_THREADS=$th timeout 200 "$W/bin/poot" bench "$MQ" --backend ptx --prompt-tokens 128 --gen-tokens 16 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror"; echo "30B compile threads $th: total $(echo "$(date +%s.%N) - $t0" | bc) s"; done
ls "$W/models"; ls "$W/llama.cpp/build/bin" | head -30
