#!/usr/bin/env bash
# A copy call (carries .bench/p2: SmolLM2 piece 2).
source .bench/s17/env.sh
cp .bench/p2/* "$W/"; ls -la "$W"/smollm2*; echo "build: $(tail -1 "$W/build.log")"
