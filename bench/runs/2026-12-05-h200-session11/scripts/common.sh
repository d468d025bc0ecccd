#!/usr/bin/env bash
# Shared by every call: a work folder that outlives the call (the machine stays warm between
# calls), the repository's scripts copied there, and the carried folders beside them, so the
# phases of bench/h200.sh find them (and the parts carried by earlier calls).
set -uo pipefail
W=/tmp/poot-bench
mkdir -p "$W/repo/.bench" "$W/models" "$W/results" "$W/bin"
cp -r bench scripts "$W/repo/"
mkdir -p "$W/repo/crates/poot-models/tests/fixtures"
cp -r crates/poot-models/tests/fixtures/real "$W/repo/crates/poot-models/tests/fixtures/"
for c in .bench/c1 .bench/c2 .bench/c3; do [ -d "$c" ] && cp -r "$c" "$W/repo/.bench/"; done
export POOT_CACHE="$W/cache" XDG_RUNTIME_DIR=/tmp
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
# cuBLASLt for the library contractions (POOT_TUNING=lib=1).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
cd "$W/repo"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
