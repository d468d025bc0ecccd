#!/usr/bin/env bash
# Prepares, on this machine, everything bench/h200.sh needs on the GPU machine, which has no
# network and no cargo. Writes three folders under .bench/ (ignored by git), each small enough
# to travel with the working tree in one device call (64 MiB in all, the tree included):
#
#   .bench/c1  llama.cpp's source from the llama-cpp-python sdist, trimmed to what llama-bench
#              needs with CUDA (xz tarball), and the first third of the SmolLM2 GGUF
#   .bench/c2  the gguf wheel (numpy, pyyaml, tqdm and requests are on the device image), and
#              the second third of the SmolLM2 GGUF
#   .bench/c3  the poot and poot-serve release binaries, the `profile` and `greedy_check`
#              examples (stripped, xz) and the last third of the SmolLM2 GGUF
#
# Then, on the device, one call per folder (see bench/README.md):
#   carry .bench/c1: bash bench/h200.sh build
#   carry .bench/c2: bash bench/h200.sh models
#   carry .bench/c3: bash bench/h200.sh bench
#
# Usage: scripts/bench/prepare-device.sh [--skip-build]   (--skip-build: reuse the binary in
#        $CARGO_TARGET_DIR/release, or target/release)
set -euo pipefail
cd "$(dirname "$0")/../.."

LLAMA_CPP_PYTHON=0.3.36
GGUF=0.19.0
out=.bench
cache="${POOT_CACHE:-$HOME/.cache/poot}"
smollm2="$cache/models/smollm2-135m-instruct-q4_1.gguf"
target="${CARGO_TARGET_DIR:-target}"
skip_build=0
[ "${1:-}" = "--skip-build" ] && skip_build=1

grep -qx '/.bench/' .gitignore || { echo "error: .bench/ is not ignored by .gitignore" >&2; exit 1; }
[ -f "$smollm2" ] || { echo "error: $smollm2 missing (run: poot models smollm2)" >&2; exit 1; }
py=python3
command -v "$py" >/dev/null || { echo "error: python3 is needed (for pip download)" >&2; exit 1; }

mkdir -p "$out/c1" "$out/c2" "$out/c3" "$out/download"

# 1. llama.cpp, from the llama-cpp-python source package.
sdist="$out/download/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
if [ ! -f "$sdist" ]; then
  # Only this package as source: its build requirements (for pip's metadata step) come as
  # wheels, so nothing is compiled here.
  "$py" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$out/download" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON"
fi
[ -f "$sdist" ] || { echo "error: pip did not save $sdist" >&2; exit 1; }
# Keep what configuring and building llama-bench, llama-batched-bench, llama-server,
# llama-lookup and llama-speculative read:
# the build files, ggml (CPU and CUDA backends), the library, common, the tools CMake adds
# (the server without its tests; its web UI is configured off) and vendored headers. Drop
# vocab models, docs, tests, examples and other backends.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp" \
  --exclude='*/.git/*' --exclude='*/vendor/llama.cpp/models/*' --exclude='*/vendor/llama.cpp/docs/*' \
  --exclude='*/vendor/llama.cpp/tests/*' --exclude='*/vendor/llama.cpp/examples/*' \
  --exclude='*/vendor/llama.cpp/benches/*' --exclude='*/vendor/llama.cpp/media/*' \
  --exclude='*/vendor/llama.cpp/tools/server/tests/*' --exclude='*/vendor/llama.cpp/tools/server/public*' \
  --exclude='*/vendor/llama.cpp/.devops/*' --exclude='*/vendor/llama.cpp/.github/*' \
  "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
src="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
for backend in "$src"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in
    ggml-cpu | ggml-cuda) ;;
    *) rm -rf "$backend" ;;
  esac
done
# CMake still adds these directories: keep them as stubs of the dropped content. Of the
# examples, only the two speculative-decoding programs stay (bench/h200.sh spec runs them).
mkdir -p "$src/tests" "$src/examples"
tar -xzf "$sdist" -C "$tmp" \
  "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp/examples/lookup" \
  "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp/examples/speculative"
rm -f "$src"/examples/lookup/*.md "$src"/examples/speculative/*.md
cat >"$src/examples/CMakeLists.txt" <<'CMAKE'
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(lookup)
add_subdirectory(speculative)
CMAKE
tar -C "$src/.." -cJf "$out/c1/llama.cpp.tar.xz" llama.cpp
echo "llama.cpp $LLAMA_CPP_PYTHON source: $(du -h "$out/c1/llama.cpp.tar.xz" | cut -f1)"

# 2. The gguf wheel, for writing the synthetic models on the device.
rm -f "$out"/c2/gguf-*.whl
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$out/c2" "gguf==$GGUF"

# 3. The poot binary.
if [ "$skip_build" = 0 ]; then
  cargo build --release --locked -p poot-cli -p poot-llm -p poot-serve --bin poot --bin poot-serve \
    --example profile --example greedy_check
fi
for bin in "$target/release/poot" "$target/release/poot-serve" "$target/release/examples/profile" \
  "$target/release/examples/greedy_check"; do
  [ -x "$bin" ] || { echo "error: $bin missing" >&2; exit 1; }
  name="$(basename "$bin")"
  cp "$bin" "$tmp/$name"
  strip "$tmp/$name" 2>/dev/null || true
  xz -T0 -6 -c "$tmp/$name" >"$out/c3/$name.xz"
done
git rev-parse HEAD >"$out/c3/poot.commit"
echo "poot $(cat "$out/c3/poot.commit"): $(du -h "$out/c3/poot.xz" | cut -f1)"

# 4. SmolLM2 in three parts, one per call, with its checksum in each.
sum="$(sha256sum "$smollm2" | cut -d' ' -f1)"
size="$(stat -c %s "$smollm2")"
part=$(((size + 2) / 3))
i=0
for c in c1 c2 c3; do
  dd if="$smollm2" of="$out/$c/smollm2.part$i" bs=1M iflag=skip_bytes,count_bytes \
    skip=$((i * part)) count="$part" status=none
  echo "$sum  smollm2-135m-instruct-q4_1.gguf" >"$out/$c/smollm2.sha256"
  i=$((i + 1))
done

for c in c1 c2 c3; do
  echo "$out/$c: $(du -sh "$out/$c" | cut -f1)"
done
echo "tracked files: $(git ls-files -z | du -ch --files0-from=- | tail -1 | cut -f1) (each call sends these too; 64 MiB in all)"
