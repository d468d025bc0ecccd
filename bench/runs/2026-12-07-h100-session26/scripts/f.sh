#!/usr/bin/env bash
# Session 26, call F (a fresh machine, little device time left): gpt-oss's 16 rows decoding
# together (64 routed rows) on the routed tiles (default, from 64 rows) beside the grouped
# kernel (routed_tiles=0), on the cut 6-layer shape, poot at a7b7b17.
# Run: bash .bench/s26/f.sh, carry [".bench/s26", ".bench/c49"].
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s26/env.sh
export POOT_PTX_COMPILE_THREADS=0
echo "poot: $(cat .bench/c49/poot.commit)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/s26/gguf-*.whl
MG6="$W/models/gpt-oss-20b-6l.gguf"
PYTHONPATH="$W/site" python3 scripts/bench/synthetic_gguf.py --shape gpt-oss-20b --type mxfp4 --layers 6 -q -o "$MG6" >/dev/null 2>&1
unpack .bench/c49/poot.xz
for t in "" routed_tiles=0 ""; do T=70 rows1 "$MG6" 16 "$t"; done
date -u
