#!/usr/bin/env bash
# Call C (carries .bench/c2: the second third of SmolLM2): where guided decoding's cost on the
# 8B model goes: the unconstrained run with the adjusting head (--logit-bias, chained), and the
# guided run again.
set -uo pipefail
exec > >(tee -a "$OUT/c.log") 2>&1
source .bench/s12/env.sh
cp .bench/c2/smollm2.part1 "$W/"
P="$(cat bench/prompts/guided.txt)"
echo "[free, adjusting head] $(timeout 100 "$W/bin/poot" run "$M8" --backend ptx --max-new 256 -v --ignore-eos --logit-bias 0=0 "$P" 2>&1 >/dev/null | grep -E "tok/s|rror" | tr '\n' ' ')"
echo "[schema] $(timeout 100 "$W/bin/poot" run "$M8" --backend ptx --max-new 256 -v --json-schema bench/prompts/guided-schema.json "$P" 2>&1 >/dev/null | grep -E "tok/s|guided|rror" | tr '\n' ' ')"
date -u
