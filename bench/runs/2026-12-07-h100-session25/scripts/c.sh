# Session 25, call C (same machine as A and B): tile tunings A/B on pp512 (16 generated tokens).
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s25/env.sh
ab() { echo "$(basename "$2" .gguf) [${1:-default}] $(POOT_TUNING="$1" timeout ${T:-60} "$W/bin/poot" bench "$2" --backend ptx --prompt-tokens 512 --gen-tokens 16 --repeats ${R:-1} 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"; }
date -u
for t in "" "tile_resident=2" "tile_resident=1" "block_tk=64" "tile_buffers=1" "tile_prefetch=0" "tile_units=along"; do ab "$t" "$MQ"; done
for t in "" "tile_resident=2" "block_tk=64"; do ab "$t" "$MG"; done
date -u
