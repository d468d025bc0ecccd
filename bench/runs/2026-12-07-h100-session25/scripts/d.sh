# Session 25, call D (same machine): prefill profiles (kernel times of a 512-token chunk at
# position 512, f16 KV) of both MoE shapes. Carry [".bench/s25", ".bench/c46"] (profile binary).
source .bench/s25/env.sh >/dev/null; unpack .bench/c46/profile.xz
for m in "$MQ" "$MG"; do echo "== $m"; timeout 150 "$W/bin/profile" "$m" --backend ptx --kv-f16 --prefill 512 --capacity 1024 --reps 3 --top 14 2>&1 | grep -vE "^(loaded|layout|device)" | head -24; done 2>&1 | tee "$OUT/e.log"
