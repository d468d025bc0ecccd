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
#   bash bench/h200.sh batched [NAME..] poot bench --rows 16/64 beside llama-batched-bench
#   bash bench/h200.sh serve [NAME..] poot-serve and llama-server under scripts/bench/serve_sweep.py
#   bash bench/h200.sh spec           speculative decoding: poot beside llama-lookup and
#                                     llama-speculative on a code-editing prompt
#   bash bench/h200.sh path NAME      print where model NAME is written (bench/ab.sh uses it)
#   bash bench/h200.sh all            every phase in turn
# Models: smollm2 (SmolLM2-135M Q4_1), llama1b-f16, llama1b-q4_0, llama8b-f16, llama8b-q4_0,
# llama8b-q4_k_m; written only when named: smollm2s-q4_0 (SmolLM2-shaped, random Q4_0 weights,
# for serving without the real file's three parts), qwen30b-a3b-q4_k_m (Qwen3-30B-A3B-shaped, 18.6 GB)
# and gpt-oss-20b-mxfp4 (gpt-oss-20b-shaped, MXFP4 experts, 12 GB).
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
LLAMA_BATCHED="$LLAMA_SRC/build/bin/llama-batched-bench"
LLAMA_SERVER="$LLAMA_SRC/build/bin/llama-server"
LLAMA_LOOKUP="$LLAMA_SRC/build/bin/llama-lookup"
LLAMA_SPECULATIVE="$LLAMA_SRC/build/bin/llama-speculative"
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
    llama1b-smolvocab) echo "$MODELS/llama-1b-f16-smolvocab.gguf" ;;
    smollm2s-q4_0) echo "$MODELS/smollm2-shaped-q4_0.gguf" ;;
    qwen30b-a3b-q4_k_m) echo "$MODELS/qwen3-30b-a3b-q4_k_m.gguf" ;;
    gpt-oss-20b-mxfp4) echo "$MODELS/gpt-oss-20b-mxfp4.gguf" ;;
    *) return 1 ;;
  esac
}

llama_built() {
  local b
  for b in "$LLAMA_BENCH" "$LLAMA_BATCHED" "$LLAMA_SERVER" "$LLAMA_LOOKUP" "$LLAMA_SPECULATIVE"; do
    [ -x "$b" ] || return 1
  done
}

build() {
  if llama_built; then
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
      -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
      >"$W/cmake-configure.log" 2>&1 || { tail -30 "$W/cmake-configure.log"; die "configure failed"; }
  fi
  say "building llama-bench, llama-batched-bench, llama-server, llama-lookup and llama-speculative (-j$(nproc), at most ${BUILD_SECONDS:-540} s this call)"
  local started=$SECONDS
  timeout "${BUILD_SECONDS:-540}" cmake --build "$LLAMA_SRC/build" --target llama-bench \
    llama-batched-bench llama-server llama-lookup llama-speculative -j"$(nproc)" \
    >"$W/cmake-build.log" 2>&1
  local rc=$?
  if llama_built; then
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
  local spec name shape kind path donor extra
  # llama1b-smolvocab (only when named): 1B-shaped with SmolLM2's tokenizer, a target that
  # SmolLM2 can draft for (bench/h200.sh spec). The mixtures of experts, 12-19 GB, only when
  # named too (a fourth field of `-`: no donor).
  for spec in "llama1b-f16 1b f16" "llama1b-q4_0 1b q4_0" "llama8b-f16 8b f16" \
    "llama8b-q4_0 8b q4_0" "llama8b-q4_k_m 8b q4_k_m" "llama1b-smolvocab 1b f16 smollm2" \
    "smollm2s-q4_0 smollm2 q4_0 -" \
    "qwen30b-a3b-q4_k_m 30b-a3b q4_k_m -" "gpt-oss-20b-mxfp4 gpt-oss-20b mxfp4 -"; do
    read -r name shape kind donor <<<"$spec"
    if { [ $# -gt 0 ] || [ -n "$donor" ]; } && [[ " $* " != *" $name "* ]]; then
      continue
    fi
    extra=()
    if [ -n "$donor" ] && [ "$donor" != - ]; then
      [ -f "$(model_path "$donor")" ] || die "$name needs $donor's GGUF first"
      extra=(--tokenizer-from "$(model_path "$donor")")
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
        "${extra[@]}" -q -o "$path" || die "writing $name failed"
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

poot_serve_binary() {
  local bin="$W/bin/poot-serve" xz
  [ -x "$bin" ] && return 0
  xz="$(carried poot-serve.xz)" || die "poot-serve binary missing: carry .bench/c3"
  unxz_to "$xz" "$bin.tmp" && chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin"
}

SERVE_MODELS=(smollm2 llama1b-f16 llama8b-q4_k_m)

# Many rows decoding together: `poot bench --rows N` against llama-batched-bench's S_PP and
# S_TG on the same file (-npp BPP -ntg BTG, ROWS rows).
batched() {
  poot_binary
  smollm2 || true
  local names=("$@") name path rows npl
  [ ${#names[@]} = 0 ] && names=("${SERVE_MODELS[@]}")
  local pp="${BPP:-128}" tg="${BTG:-128}"
  local rowlist="${ROWS:-16 64}"
  npl="$(echo "$rowlist" | tr ' ' ',')"
  for name in "${names[@]}"; do
    path="$(model_path "$name")" || die "unknown model $name"
    [ -f "$path" ] || { say "$name: $path missing (run the models phase), skipped"; continue; }
    for rows in $rowlist; do
      say "$name: poot bench --rows $rows"
      # shellcheck disable=SC2086
      timeout "${ROWS_SECONDS:-240}" "$POOT" bench "$path" --backend "$BACKEND" --rows "$rows" \
        --prompt-tokens "$pp" --gen-tokens "$tg" --repeats "${BR:-2}" --json ${POOT_ARGS:-} \
        >"$RESULTS/$name.rows$rows.poot.json" 2>"$RESULTS/$name.rows$rows.poot.log" ||
        { tail -3 "$RESULTS/$name.rows$rows.poot.log"; say "$name: poot --rows $rows failed"; }
      cat "$RESULTS/$name.rows$rows.poot.json"
    done
    if [ -x "$LLAMA_BATCHED" ]; then
      say "$name: llama-batched-bench -npl $npl"
      "$LLAMA_BATCHED" -m "$path" -ngl 99 -fa on -c $(( ${rowlist##* } * (pp + tg) + 256 )) \
        -b 2048 -ub 512 -npp "$pp" -ntg "$tg" -npl "$npl" --output-format jsonl \
        >"$RESULTS/$name.batched.llama.jsonl" 2>"$RESULTS/$name.batched.llama.log" ||
        { tail -5 "$RESULTS/$name.batched.llama.log"; say "$name: llama-batched-bench failed"; }
      cat "$RESULTS/$name.batched.llama.jsonl"
    fi
  done
}

# Speculative decoding against llama.cpp's programs, greedy, on a code-editing prompt
# (bench/prompts/code-edit.txt): prompt lookup on SmolLM2 (poot --spec-ngram, llama-lookup),
# and SmolLM2 drafting for the 1B-shaped model with SmolLM2's vocabulary (poot --draft-model,
# llama-speculative); each engine also without speculation. SPEC_K drafted tokens (4), SPEC_GEN
# new tokens (256).
spec() {
  poot_binary
  smollm2 || die "SmolLM2 is needed"
  local k="${SPEC_K:-4}" gen="${SPEC_GEN:-256}" prompt="$repo/bench/prompts/code-edit.txt"
  local small target
  small="$(model_path smollm2)"
  target="$(model_path llama1b-smolvocab)"
  [ -f "$target" ] || models llama1b-smolvocab >/dev/null || die "writing llama1b-smolvocab failed"
  local run name model flags
  # name|model|poot flags|llama program and flags
  for run in \
    "lookup-base|$small||" \
    "lookup|$small|--spec-ngram --spec-tokens $k|lookup" \
    "draft-base|$target||" \
    "draft|$target|--draft-model $small --spec-tokens $k|speculative"; do
    IFS='|' read -r name model flags prog <<<"$run"
    say "spec $name: poot bench $flags"
    # shellcheck disable=SC2086
    timeout 300 "$POOT" bench "$model" --backend "$BACKEND" --prompt-file "$prompt" \
      --gen-tokens "$gen" --repeats "${R}" --json $flags >"$RESULTS/spec-$name.poot.json" \
      2>"$RESULTS/spec-$name.poot.log" || { tail -3 "$RESULTS/spec-$name.poot.log"; say "poot failed"; }
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("decode", round(d["decode_tok_s"],1), "tok/s", d.get("speculation") or "")' \
      "$RESULTS/spec-$name.poot.json" 2>/dev/null
    [ -z "$prog" ] && continue
    local bin="$LLAMA_SRC/build/bin/llama-$prog" extra=()
    [ -x "$bin" ] || { say "llama-$prog not built, skipped"; continue; }
    [ "$prog" = speculative ] && extra=(-md "$small" -ngld 99)
    say "spec $name: llama-$prog"
    timeout 300 "$bin" -m "$model" "${extra[@]}" -f "$prompt" -n "$gen" --spec-draft-n-max "$k" \
      -ngl 99 -fa on --temp 0 --ignore-eos -c 4096 -s 1 >"$RESULTS/spec-$name.llama.log" 2>&1 ||
      { tail -5 "$RESULTS/spec-$name.llama.log"; say "llama-$prog failed"; }
    grep -E "decoded .* speed|n_drafted|n_accept|accept " "$RESULTS/spec-$name.llama.log"
  done
  if [ -x "$LLAMA_BENCH" ]; then
    for model in "$small" "$target"; do
      say "spec: llama-bench decode without speculation, $(basename "$model")"
      "$LLAMA_BENCH" -m "$model" -ngl 99 -fa 1 -p 0 -n "$gen" -r "$R" -o json \
        >"$RESULTS/spec-$(basename "$model" .gguf).llama-bench.json" 2>/dev/null
      grep -E '"avg_ts"' "$RESULTS/spec-$(basename "$model" .gguf).llama-bench.json"
    done
  fi
  tar -czf "$OUTDIR/results.tar.gz" -C "$RESULTS" .
}

# Waits until URL answers /health (or /v1/models), at most $2 seconds; prints the seconds.
wait_ready() {
  local url="$1" limit="$2" t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' \
      "$url" >/dev/null 2>&1 && { echo $((SECONDS - t0)); return 0; }
    sleep 0.2
  done
  return 1
}

# The serving benchmark: poot-serve and llama-server, each with PARALLEL rows on the same GGUF,
# driven by scripts/bench/serve_sweep.py (concurrency LEVELS, LOAD fixed and/or spread); poot's
# ready time and a lone request's speed beside `poot bench`.
serve() {
  poot_binary
  poot_serve_binary
  smollm2 || true
  local names=("$@") name path vocab
  [ ${#names[@]} = 0 ] && names=("${SERVE_MODELS[@]}")
  local par="${PARALLEL:-64}" ctx="${SERVE_CTX:-1024}"
  for name in "${names[@]}"; do
    path="$(model_path "$name")" || die "unknown model $name"
    [ -f "$path" ] || { say "$name: $path missing, skipped"; continue; }
    case "$name" in
      smollm2 | smollm2s-*) vocab=49152 ;;
      *) vocab=128256 ;;
    esac
    # Twice: the first start fills the kernel cache (cold) and is left to prepare every step
    # variant, so the second start (warm) reads them all from the cache. STARTS=warm skips the
    # cold start where an earlier call filled the cache.
    local pid ready t0 start w
    for start in ${STARTS:-cold warm}; do
      say "$name: poot-serve --parallel $par ($start start)"
      t0=$SECONDS
      # shellcheck disable=SC2086
      "$W/bin/poot-serve" --model "$path" --backend "$BACKEND" --port 18080 --parallel "$par" \
        --ctx-size "$ctx" ${SERVE_ARGS:-} >"$RESULTS/$name.serve.poot.$start.log" 2>&1 &
      pid=$!
      wait_ready http://127.0.0.1:18080 180 >/dev/null || { tail -5 "$RESULTS/$name.serve.poot.$start.log"; kill $pid; say "$name: poot-serve not ready"; continue 2; }
      ready=$((SECONDS - t0))
      say "$name: poot-serve ready after $ready s ($start)"
      # Idle time prepares the remaining step variants: wait for that (at most WARM_SECONDS).
      w=0
      while [ $w -lt "${WARM_SECONDS:-120}" ] && ! grep -q "every step variant is prepared" "$RESULTS/$name.serve.poot.$start.log"; do
        sleep 1; w=$((w + 1))
      done
      say "$name: variants prepared $w s after ready ($start)"
      echo "{\"ready_s\": $ready, \"every_variant_after_ready_s\": $w}" >"$RESULTS/$name.serve.poot.ready-$start.json"
      grep -E "prepared|engine ready|loaded" "$RESULTS/$name.serve.poot.$start.log"
      [ "$start" = warm ] && break
      kill $pid; wait $pid 2>/dev/null
    done
    cp "$RESULTS/$name.serve.poot.warm.log" "$RESULTS/$name.serve.poot.log"
    for load in ${LOADS:-fixed}; do
      python3 "$repo/scripts/bench/serve_sweep.py" --url http://127.0.0.1:18080 --vocab "$vocab" \
        --concurrency "${LEVELS:-1,8,32,64,128}" --load "$load" --label poot \
        --json "$RESULTS/$name.serve.$load.poot.json" || say "$name: sweep failed"
    done
    kill $pid; wait $pid 2>/dev/null
    # The single-stream speed a lone request is held to (the sweep's C=1 level).
    "$POOT" bench "$path" --backend "$BACKEND" --prompt-tokens "$P" --gen-tokens "$N" --repeats 2 \
      --json >"$RESULTS/$name.serve.bench.poot.json" 2>"$RESULTS/$name.serve.bench.poot.log" ||
      say "$name: poot bench failed"
    if [ -x "$LLAMA_SERVER" ]; then
      say "$name: llama-server -np $par"
      "$LLAMA_SERVER" -m "$path" -ngl 99 -fa on -np "$par" -c $((par * ctx)) --port 18081 \
        -b 2048 -ub 512 >"$RESULTS/$name.serve.llama.log" 2>&1 &
      pid=$!
      wait_ready http://127.0.0.1:18081 180 >/dev/null || { tail -5 "$RESULTS/$name.serve.llama.log"; kill $pid; continue; }
      for load in ${LOADS:-fixed}; do
        python3 "$repo/scripts/bench/serve_sweep.py" --url http://127.0.0.1:18081 --vocab "$vocab" \
          --concurrency "${LEVELS:-1,8,32,64,128}" --load "$load" --label llama.cpp \
          --json "$RESULTS/$name.serve.$load.llama.json" || say "$name: sweep failed"
      done
      kill $pid; wait $pid 2>/dev/null
    fi
  done
  tar -czf "$OUTDIR/results.tar.gz" -C "$RESULTS" .
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
  batched) batched "$@" ;;
  serve) serve "$@" ;;
  spec) spec ;;
  all) build && models && bench ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
