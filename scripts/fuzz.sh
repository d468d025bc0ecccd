#!/usr/bin/env bash
# Fuzzes poot-load's parsers and the model load (config to family, poot-models) with libFuzzer
# on stable Rust, for a bounded time per target.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]     (default: 60 s, every target)
#   POOT_FUZZ_RUNS=10000000 scripts/fuzz.sh 86400          (a campaign: N inputs per target)
#
# Targets (fuzz/fuzz_targets/): gguf_parse, safetensors_parse, gguf_load, hf_load, model_load.
# Each run is seeded from the committed fixtures (crates/poot-load/tests/fixtures; model_load
# from crates/poot-models/tests/fixtures/tiny_llama.gguf) plus the corpus
# earlier runs grew (fuzz/corpus/, not committed). A crash, a timeout or an allocation over
# the malloc limit fails the run and leaves the input in fuzz/artifacts/TARGET/; reproduce it
# with `fuzz/target/<triple>/release/TARGET fuzz/artifacts/TARGET/<file>`.
#
# Stable Rust has no -Zsanitizer, so this builds with LLVM's sanitizer-coverage passes alone
# (the flags cargo-fuzz passes, minus AddressSanitizer): coverage-guided, with overflow and
# debug assertions on (fuzz/Cargo.toml), without ASan's memory checks. poot-load has no
# unsafe code besides the memory map.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-60}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(gguf_parse safetensors_parse gguf_load hf_load model_load)
fi

triple="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$root/fuzz/target}"
# `--target` keeps these flags off build scripts and proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cforce-frame-pointers"
cargo build --quiet --release --manifest-path "$root/fuzz/Cargo.toml" --target "$triple" --bins

fixtures="$root/crates/poot-load/tests/fixtures/synthetic"
# gguf_load and hf_load write each input to a scratch file: keep those in memory when we can.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

# An hf_load input: a 2-byte little-endian config length, config.json, model.safetensors.
hf_seed() { # dir out
  local len
  len=$(stat -c %s "$1/config.json")
  printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))" > "$2"
  cat "$1/config.json" "$1/model.safetensors" >> "$2"
}

seed() { # target corpus-dir
  case "$1" in
    gguf_parse | gguf_load)
      cp "$fixtures"/*.gguf "$2"/ ;;
    safetensors_parse)
      cp "$fixtures"/*.safetensors "$fixtures"/sharded/*.safetensors "$fixtures"/*/model.safetensors.index.json "$2"/
      for d in gptq awq fp8_block fp8_channel fp8_noscale; do
        cp "$fixtures/$d/model.safetensors" "$2/$d.safetensors"
        cp "$fixtures/$d/config.json" "$2/$d.config.json"
      done ;;
    hf_load)
      for d in gptq awq fp8_block fp8_channel fp8_noscale; do
        hf_seed "$fixtures/$d" "$2/$d.bin"
      done ;;
    model_load)
      cp "$root/crates/poot-models/tests/fixtures/tiny_llama.gguf" "$2"/ ;;
    *) echo "unknown fuzz target $1" >&2; exit 2 ;;
  esac
}

status=0
for t in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/$t"
  artifacts="$root/fuzz/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  seed "$t" "$corpus"
  echo "== $t: ${secs}s"
  # POOT_FUZZ_RUNS=N: a campaign of N inputs per target (the time limit still applies).
  if ! "$CARGO_TARGET_DIR/$triple/release/$t" "$corpus" ${POOT_FUZZ_RUNS:+-runs="$POOT_FUZZ_RUNS"} \
      -max_total_time="$secs" -max_len=32768 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 2> "$artifacts/last-run.log"; then
    status=1
    echo "!! $t failed; see $artifacts/last-run.log" >&2
  fi
  rm -rf "${TMPDIR:-/tmp}"/poot-fuzz-*  # the targets' scratch files
  grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|panicked" "$artifacts/last-run.log" || true
done
exit "$status"
