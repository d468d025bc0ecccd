#!/usr/bin/env bash
# Call G (fresh machine; carries .bench/c9: poot with f16 keys and values read a word per two
# features in the decode attention, and decode_wgs=N): poot alone. 1B F16: a 3968-token prompt
# and 64 rows, f16 and f32 cache; 8B Q4_K_M (lib_rows=16, f16 cache): 16 and 64 rows with the
# decode attention's workgroups per multiprocessor at 2 (default) and 8.
set -uo pipefail
exec > >(tee -a "$OUT/g.log") 2>&1
source .bench/s17/env.sh
cat .bench/c9/poot.commit
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c9/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
unpack .bench/c9/*.xz
wait_model "$M1" 100 && sleep 2
for kv in f16 f32 f16 f32; do
  echo "llama-1b-f16 long kv $kv $(timeout 120 "$W/bin/poot" bench "$M1" --backend ptx --kv-type $kv --prompt-tokens 3968 --gen-tokens 64 --repeats 1 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
done
for kv in f16 f32; do rows "$M1" 64 "" $kv; done
rows "$M1" 64 decode_wgs=8 f16
wait_model "$M8" 100
rows "$M8" 16 lib_rows=16 f16
rows "$M8" 16 lib_rows=16,decode_wgs=8 f16
rows "$M8" 64 lib_rows=16,decode_wgs=8 f16
rows "$M8" 64 lib_rows=16 f16
date -u
