#!/usr/bin/env bash
# Call H (fresh machine; carries .bench/c11): 1B Q4_0, 32 rows: block tiles (lib_rows=64) against
# the library (lib_rows=16).
set -uo pipefail
exec > >(tee -a "$OUT/h.log") 2>&1
source .bench/s18/env.sh
cat .bench/c11/poot.commit
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c11/gguf-*.whl
PYTHONPATH="$W/site" python3 scripts/bench/synthetic_gguf.py --shape 1b --type q4_0 -q -o "$M1Q" &
unpack .bench/c11/*.xz; wait
for t in lib_rows=64 lib_rows=16 lib_rows=64 lib_rows=16; do rows1 "$M1Q" 32 "$t"; done
date -u
