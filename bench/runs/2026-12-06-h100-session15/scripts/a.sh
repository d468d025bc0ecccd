#!/usr/bin/env bash
# Call A (fresh machine; carries .bench/p0: llama.cpp's source, SmolLM2 part 0): Vulkan checked;
# llama.cpp built in the background (nice 10), SmolLM2's first part kept.
set -uo pipefail
exec > >(tee -a "$OUT/a.log") 2>&1
source .bench/s15/env.sh
echo "vulkan loader: $(ldconfig -p | grep -q libvulkan.so.1 && echo present || echo absent)"
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null
cp .bench/p0/smollm2.part0 .bench/p0/smollm2.sha256 "$W/"
mkdir -p .bench/c1 && cp .bench/p0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
sleep 12; tail -2 "$W/build.log"
