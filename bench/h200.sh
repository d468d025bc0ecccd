#!/usr/bin/env bash
# The benchmark on the GPU machine: poot and llama.cpp's llama-bench on the same GGUF files in
# the same device call, then one markdown table (bench/README.md says how to run it).
#
# Nothing here needs the network or cargo: scripts/bench/prepare-device.sh, run beforehand on
# the development machine, puts the poot binary, llama.cpp's source, the gguf wheel and the
# SmolLM2 GGUF (in three parts) under .bench/c1, c2 and c3, carried one folder per call.
#
# Phases, each within one 10-minute call (files persist between calls on a warm machine):
#   bash bench/h200.sh build          build llama-bench with CUDA (resumable: run it again
#                                     if it says the build is unfinished)
#   bash bench/h200.sh models [NAME..] write the synthetic models (default: all five)
#   bash bench/h200.sh bench [NAME..] run poot bench and llama-bench on each model (default:
#                                     all), then print the table
#   bash bench/h200.sh table          print the table from the results so far
#   bash bench/h200.sh breakdown [NAME..] where each model's time goes: the `profile` example's
#                                     decode step by kernel (position 576 of 1024), and with
#                                     Nsight Compute the first prefill kernels of a 512-token
#                                     prompt, one by one
#   bash bench/h200.sh path NAME      print where model NAME is written (bench/ab.sh uses it)
#   bash bench/h200.sh all            every phase in turn
# Models: smollm2 (SmolLM2-135M Q4_1), llama1b-f16, llama1b-q4_0, llama8b-f16, llama8b-q4_0,
# llama8b-q4_k_m.
#
# Environment: POOT_BENCH_DIR (work folder, default /tmp/poot-bench), PROMPT (512), GEN (128),
# REPEATS (5), BACKEND (ptx), POOT_ARGS (more `poot bench` flags), BUILD_SECONDS (540),
# LLAMA_CUDA (ON; OFF builds a CPU llama-bench, for a dry run without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

W="${POOT_BENCH_DIR:-/tmp/poot-bench}"
P="${PROMPT:-512}"
N="${GEN:-128}"
R="${REPEATS:-5}"
BACKEND="${BACKEND:-ptx}"
OUTDIR="${OUT:-$W/out}"
LLAMA_SRC="$W/llama.cpp"
LLAMA_BENCH="$LLAMA_SRC/build/bin/llama-bench"
POOT="$W/bin/poot"
MODELS="$W/models"
RESULTS="$W/results"
ALL_MODELS=(smollm2 llama1b-f16 llama1b-q4_0 llama8b-f16 llama8b-q4_0 llama8b-q4_k_m)
mkdir -p "$W" "$OUTDIR" "$MODELS" "$RESULTS" "$W/bin"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# poot's compiled-kernel cache persists between calls on the same machine.
export POOT_CACHE="$W/cache"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"

say() { echo "== $*"; }
die() { echo "error: $*" >&2; exit 1; }

# The first carried copy of FILE under .bench/c1..c3.
carried() {
  local c
  for c in .bench/c1 .bench/c2 .bench/c3; do
    [ -e "$c/$1" ] && { echo "$c/$1"; return 0; }
  done
  return 1
}

unxz_to() { # SRC DST
  if command -v xz >/dev/null; then
    xz -dc "$1" >"$2"
  else
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2"
  fi
}

model_path() {
  case "$1" in
    smollm2) echo "$MODELS/smollm2-135m-instruct-q4_1.gguf" ;;
    llama1b-f16) echo "$MODELS/llama-1b-f16.gguf" ;;
    llama1b-q4_0) echo "$MODELS/llama-1b-q4_0.gguf" ;;
    llama8b-f16) echo "$MODELS/llama-8b-f16.gguf" ;;
    llama8b-q4_0) echo "$MODELS/llama-8b-q4_0.gguf" ;;
    llama8b-q4_k_m) echo "$MODELS/llama-8b-q4_k_m.gguf" ;;
    *) return 1 ;;
  esac
}

build() {
  if [ -x "$LLAMA_BENCH" ]; then
    say "llama-bench already built: $LLAMA_BENCH"
    return 0
  fi
  if [ ! -f "$LLAMA_SRC/CMakeLists.txt" ]; then
    local src
    src="$(carried llama.cpp.tar.xz)" || die "llama.cpp source missing: carry .bench/c1"
    say "unpacking $src"
    rm -rf "$LLAMA_SRC"
    mkdir -p "$LLAMA_SRC.tmp"
    unxz_to "$src" "$W/llama.cpp.tar"
    tar -xf "$W/llama.cpp.tar" -C "$LLAMA_SRC.tmp" && mv "$LLAMA_SRC.tmp/llama.cpp" "$LLAMA_SRC"
    rm -rf "$LLAMA_SRC.tmp" "$W/llama.cpp.tar"
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ ! -f "$LLAMA_SRC/build/CMakeCache.txt" ]; then
    say "configuring llama.cpp (CUDA ${LLAMA_CUDA:-ON}, sm_90)"
    cmake -S "$LLAMA_SRC" -B "$LLAMA_SRC/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DGGML_CUDA="${LLAMA_CUDA:-ON}" -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
      >"$W/cmake-configure.log" 2>&1 || { tail -30 "$W/cmake-configure.log"; die "configure failed"; }
  fi
  say "building llama-bench (-j$(nproc), at most ${BUILD_SECONDS:-540} s this call)"
  local started=$SECONDS
  timeout "${BUILD_SECONDS:-540}" cmake --build "$LLAMA_SRC/build" --target llama-bench -j"$(nproc)" \
    >"$W/cmake-build.log" 2>&1
  local rc=$?
  if [ -x "$LLAMA_BENCH" ]; then
    say "llama-bench built in $((SECONDS - started)) s"
  elif [ "$rc" = 124 ]; then
    tail -3 "$W/cmake-build.log"
    say "build unfinished after $((SECONDS - started)) s: run \`bash bench/h200.sh build\` again (it resumes)"
    return 2
  else
    tail -40 "$W/cmake-build.log"
    die "llama-bench build failed (log: $W/cmake-build.log)"
  fi
}

# Joins the three carried parts of the SmolLM2 GGUF once all have arrived.
smollm2() {
  local dst
  dst="$(model_path smollm2)"
  [ -f "$dst" ] && return 0
  local parts=() i p
  for i in 0 1 2; do
    p="$(carried "smollm2.part$i")" || { say "SmolLM2 part $i not here yet (it travels in .bench/c$((i + 1)))"; return 1; }
    parts+=("$p")
  done
  cat "${parts[@]}" >"$dst.tmp.$$"
  local want
  want="$(cut -d' ' -f1 "$(carried smollm2.sha256)")"
  if [ "$(sha256sum "$dst.tmp.$$" | cut -d' ' -f1)" != "$want" ]; then
    rm -f "$dst.tmp.$$"
    die "the joined SmolLM2 GGUF does not match its checksum"
  fi
  mv "$dst.tmp.$$" "$dst"
  say "SmolLM2 GGUF joined and checked"
}

models() {
  smollm2 || true
  # The gguf package: the carried wheel, else llama.cpp's own gguf-py.
  local site="$W/site"
  if [ ! -d "$site/gguf" ]; then
    local wheel
    wheel="$(ls .bench/c*/gguf-*.whl 2>/dev/null | head -1)"
    if [ -n "$wheel" ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" ||
        die "installing $wheel failed"
    elif [ -d "$LLAMA_SRC/gguf-py/gguf" ]; then
      site="$LLAMA_SRC/gguf-py"
    else
      die "no gguf package: carry .bench/c2"
    fi
  fi
  local spec name shape kind path
  for spec in "llama1b-f16 1b f16" "llama1b-q4_0 1b q4_0" "llama8b-f16 8b f16" \
    "llama8b-q4_0 8b q4_0" "llama8b-q4_k_m 8b q4_k_m"; do
    read -r name shape kind <<<"$spec"
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then
      continue
    fi
    path="$(model_path "$name")"
    if [ -f "$path" ]; then
      say "$name: $path exists"
      continue
    fi
    # One writer per file: two runs of this phase at once (one in the background) wait for
    # each other instead of racing on the same temporary file.
    exec 9>"$path.lock"
    flock 9
    if [ -f "$path" ]; then
      say "$name: $path written meanwhile"
    else
      say "writing $name"
      PYTHONPATH="$site" python3 "$repo/scripts/bench/synthetic_gguf.py" --shape "$shape" --type "$kind" \
        -q -o "$path" || die "writing $name failed"
    fi
    exec 9>&-
  done
  df -h "$MODELS" | tail -1
}

poot_binary() {
  [ -x "$POOT" ] && return 0
  local xz
  xz="$(carried poot.xz)" || die "poot binary missing: carry .bench/c3"
  unxz_to "$xz" "$POOT.tmp" && chmod +x "$POOT.tmp" && mv "$POOT.tmp" "$POOT"
  say "poot $(cat "$(carried poot.commit)" 2>/dev/null)"
}

bench() {
  poot_binary
  smollm2 || true
  [ -x "$LLAMA_BENCH" ] || say "llama-bench not built: poot only (run the build phase)"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
  local names=("$@") name path
  [ ${#names[@]} = 0 ] && names=("${ALL_MODELS[@]}")
  for name in "${names[@]}"; do
    path="$(model_path "$name")" || die "unknown model $name (known: ${ALL_MODELS[*]})"
    if [ ! -f "$path" ]; then
      say "$name: $path missing (run the models phase), skipped"
      continue
    fi
    say "$name: poot bench"
    local started=$SECONDS
    # shellcheck disable=SC2086
    "$POOT" bench "$path" --backend "$BACKEND" --prompt-tokens "$P" --gen-tokens "$N" \
      --repeats "$R" --json ${POOT_ARGS:-} >"$RESULTS/$name.poot.json.tmp" 2>"$RESULTS/$name.poot.log"
    if [ $? = 0 ]; then
      mv "$RESULTS/$name.poot.json.tmp" "$RESULTS/$name.poot.json"
    else
      rm -f "$RESULTS/$name.poot.json.tmp" "$RESULTS/$name.poot.json"
    fi
    tail -2 "$RESULTS/$name.poot.log"
    say "$name: poot took $((SECONDS - started)) s"
    if [ -x "$LLAMA_BENCH" ]; then
      started=$SECONDS
      "$LLAMA_BENCH" -m "$path" -ngl 99 -fa 1 -p "$P" -n "$N" -d "0,$P" -r "$R" -o json \
        >"$RESULTS/$name.llama.json" 2>"$RESULTS/$name.llama.log" ||
        { tail -5 "$RESULTS/$name.llama.log"; say "$name: llama-bench failed"; }
      say "$name: llama-bench took $((SECONDS - started)) s"
    fi
  done
  table
}

profile_binary() {
  local bin="$W/bin/profile" xz
  [ -x "$bin" ] && return 0
  xz="$(carried profile.xz)" || die "profile binary missing: carry .bench/c3"
  unxz_to "$xz" "$bin.tmp" && chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin"
}

# Where the time goes, per model: the decode step by kernel, and the first prefill kernels
# (about two layers) timed one by one where Nsight Compute is installed.
breakdown() {
  poot_binary
  profile_binary
  smollm2 || true
  local names=("$@") name path out
  [ ${#names[@]} = 0 ] && names=("${ALL_MODELS[@]}")
  for name in "${names[@]}"; do
    path="$(model_path "$name")" || die "unknown model $name (known: ${ALL_MODELS[*]})"
    [ -f "$path" ] || { say "$name: $path missing (run the models phase), skipped"; continue; }
    out="$OUTDIR/breakdown-$name.txt"
    say "$name: decode step by kernel"
    "$W/bin/profile" "$path" --backend "$BACKEND" --capacity "${CAPACITY:-1024}" \
      --position "${POSITION:-576}" --tokens "${TOKENS:-64}" --reps 5 --top 12 >"$out" 2>&1 ||
      say "$name: profile failed"
    if command -v ncu >/dev/null; then
      say "$name: prefill kernels (ncu)"
      {
        echo
        echo "prefill: the first ${KERNELS:-14} kernels of a $P-token prompt (ncu, gpu__time_duration.sum)"
        ncu --clock-control none --metrics gpu__time_duration.sum -c "${KERNELS:-14}" \
          "$POOT" bench "$path" --backend "$BACKEND" --prompt-tokens "$P" --gen-tokens 2 \
          --repeats 1 2>&1 | grep -E "^  [a-z]|gpu__time_duration" | sed 's/  */ /g' | paste - -
      } >>"$out"
    fi
    grep -vE "^\| [a-z_]+_[0-9]+ l" "$out"
  done
}

# The table, and every result and log in one archive ($OUT brings back at most 8 files).
table() {
  python3 "$repo/scripts/bench/table.py" "$RESULTS" | tee "$OUTDIR/table.md"
  tar -czf "$OUTDIR/results.tar.gz" -C "$RESULTS" .
}

phase="${1:-}"
shift || true
case "$phase" in
  build) build ;;
  models) models "$@" ;;
  path) model_path "${1:-}" ;;
  bench) bench "$@" ;;
  table) table ;;
  breakdown) breakdown "$@" ;;
  all) build && models && bench ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
