#!/usr/bin/env bash
# Call A (fresh machine, carries .bench/c1): Vulkan checked; the llama.cpp build starts in the
# background.
source .bench/s11/common.sh
ldconfig -p | grep -q libvulkan && echo "vulkan loader: present" || echo "vulkan loader: absent"
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null
ldconfig -p | grep -E "libcublasLt" | head -3; ls /usr/local/cuda/lib64/libcublasLt* 2>/dev/null | head -3
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
sleep 15; tail -2 "$W/build.log"
