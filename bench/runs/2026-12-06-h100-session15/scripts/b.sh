#!/usr/bin/env bash
# Call B (carries .bench/p1: SmolLM2 part 1; .bench/c7: poot, profile, greedy_check, the gguf
# wheel): the synthetic models written in the background (three writers); the shared
# suite on PTX with the block decoders.
set -uo pipefail
exec > >(tee -a "$OUT/b.log") 2>&1
source .bench/s15/env.sh
cat .bench/c7/poot.commit
cp .bench/p1/smollm2.part1 "$W/"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c7/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-q4_0 1b q4_0" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" "llama-8b-q4_0 8b q4_0" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-f16 8b f16" >/dev/null 2>&1 &)
unpack .bench/c7/*.xz
echo "== suite on PTX $(date -u +%T)"
timeout 240 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "^FAIL|^suite:|decoded for the library|decodable|rror" | head -30
ls -la "$W/models"; echo "build: $(tail -1 "$W/build.log")"; date -u
