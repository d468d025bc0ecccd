#!/usr/bin/env bash
# A copy call (carries .bench/p2: SmolLM2 piece 2); a profile of an 8B Q4_K_M 16-row step.
set -uo pipefail
exec > >(tee -a "$OUT/p.log") 2>&1
source .bench/s18/env.sh
cp .bench/p2/* "$W/"; ls -la "$W"/smollm2*
profile "$M8" --rows 16 --paged --capacity 256 --position 200
echo "build: $(tail -1 "$W/build.log")"; date -u
