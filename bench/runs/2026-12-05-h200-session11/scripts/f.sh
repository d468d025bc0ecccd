#!/usr/bin/env bash
# Call F: speculative decoding again, poot and llama.cpp's programs in one call (call E's
# llama.cpp runs used a flag this llama.cpp removed).
source .bench/s11/common.sh
rm -f "$W"/results/spec-*
REPEATS=2 bash bench/h200.sh spec
date -u
