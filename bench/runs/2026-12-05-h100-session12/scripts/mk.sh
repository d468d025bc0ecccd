#!/usr/bin/env bash
# Rebuild .bench/c5 from the current release build (test binaries, poot).
set -euo pipefail
cd /work/main
rm -f .bench/c5/*.xz
for t in device_models speculation lora guided sampling; do
  f=$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -1)
  strip -o /tmp/$t "$f"; xz -T2 -6 -c /tmp/$t > .bench/c5/$t.xz; rm /tmp/$t
done
strip -o /tmp/poot target/release/poot; xz -T2 -6 -c /tmp/poot > .bench/c5/poot.xz; rm /tmp/poot
for e in greedy_check profile; do
  strip -o /tmp/$e target/release/examples/$e; xz -T2 -6 -c /tmp/$e > .bench/c5/$e.xz; rm /tmp/$e
done
git rev-parse HEAD > .bench/c5/poot.commit
du -sh .bench/c5
