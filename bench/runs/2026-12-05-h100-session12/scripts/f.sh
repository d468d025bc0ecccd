#!/usr/bin/env bash
# Call F (warm machine): the 1B F16 decode step profiled contiguous / paged (#22).
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s12/env.sh
profile "$M1"; profile "$M1" --paged
date -u
