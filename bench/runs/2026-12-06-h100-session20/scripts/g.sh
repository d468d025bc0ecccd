#!/usr/bin/env bash
# Call G (fresh; carries .bench/c15: poot at 892fc6c plus the tile_units knob): 1B Q4_0 rows 16,
# units handed across columns (default) then along each column; then 8B Q4_0 if time is left.
set -uo pipefail
exec > >(tee -a "$OUT/g.log") 2>&1
source .bench/s20/env.sh
cat .bench/c15/poot.commit
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c15/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
PYTHONPATH="$W/site" python3 "$W/scripts/synthetic_gguf.py" --shape 1b --type q4_0 -q -o "$M1Q"
unpack .bench/c15/*.xz
T=130 rows1 "$M1Q" 16 ""
T=60 rows1 "$M1Q" 16 tile_units=along
T=40 rows1 "$M1Q" 16 ""
date -u
