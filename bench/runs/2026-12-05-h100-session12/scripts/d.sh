#!/usr/bin/env bash
# Call D (carries .bench/c3: the last third of SmolLM2): SmolLM2 assembled and checked; guided
# decoding with / without a JSON schema (and the adjusting head unconstrained).
set -uo pipefail
exec > >(tee -a "$OUT/d.log") 2>&1
source .bench/s12/env.sh
cat "$W/smollm2.part0" "$W/smollm2.part1" .bench/c3/smollm2.part2 > "$MS"
(cd "$W/models" && sha256sum -c "$W/smollm2.sha256")
guided "$MS" "SmolLM2" --chat
P="$(cat bench/prompts/guided.txt)"
echo "[free, adjusting head] $(timeout 100 "$W/bin/poot" run "$MS" --backend ptx --chat --max-new 256 -v --ignore-eos --logit-bias 0=0 "$P" 2>&1 >/dev/null | grep -E "tok/s|rror" | tr '\n' ' ')"
date -u
