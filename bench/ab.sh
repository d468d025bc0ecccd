#!/usr/bin/env bash
# A/B of two poot binaries on the GPU machine, in one device call: the shared device suite with
# B's kernels (when B's greedy_check is carried), then `poot bench` on each model with A and B
# alternating, and one markdown table of decode and prefill tok/s.
#
# Carry (prepared here, see bench/README.md): .bench/ab/a/poot.xz and .bench/ab/b/poot.xz (and
# .bench/ab/b/greedy_check.xz for the suite), each with a `commit` file naming what it is, and a
# gguf wheel under .bench/c*/ for the synthetic models.
#
#   bash bench/ab.sh [NAME..]        models as in bench/h200.sh (default: llama1b-q4_0
#                                    llama1b-f16 llama8b-q4_0)
# Environment: PROMPT (512), GEN (128), REPEATS (3), ROUNDS (2: A,B,A,B), SUITE (1), BACKEND
# (ptx; wgpu for a dry run on lavapipe).
set -uo pipefail
cd "$(dirname "$0")/.."
W="${POOT_BENCH_DIR:-/tmp/poot-bench}"
P="${PROMPT:-512}"
N="${GEN:-128}"
R="${REPEATS:-3}"
ROUNDS="${ROUNDS:-2}"
OUTDIR="${OUT:-$W/out}"
mkdir -p "$W/ab" "$OUTDIR"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"

for side in a b; do
  for f in poot greedy_check; do
    [ -f ".bench/ab/$side/$f.xz" ] || continue
    xz -dc ".bench/ab/$side/$f.xz" >"$W/ab/$f-$side" && chmod +x "$W/ab/$f-$side"
  done
  [ -x "$W/ab/poot-$side" ] || { echo "error: .bench/ab/$side/poot.xz missing" >&2; exit 1; }
  echo "$side: $(cat ".bench/ab/$side/commit" 2>/dev/null || echo unnamed)"
done

names=("$@")
[ ${#names[@]} = 0 ] && names=(llama1b-q4_0 llama1b-f16 llama8b-q4_0)
# Write the models in the background while the suite runs (both want the CPU less than the GPU).
bash bench/h200.sh models "${names[@]}" >"$W/ab/models.log" 2>&1 &
models=$!
if [ "${SUITE:-1}" = 1 ] && [ -x "$W/ab/greedy_check-b" ]; then
  echo "== suite (b)"
  POOT_CACHE="$W/cache-b" "$W/ab/greedy_check-b" ptx --suite-only 2>&1 |
    grep -E "^FAIL|^suite:"
fi
wait "$models"
tail -3 "$W/ab/models.log"

rate() { # JSON FIELD
  python3 -c 'import json,sys; print(f"{json.load(open(sys.argv[1]))[sys.argv[2]]:.1f}")' "$1" "$2" 2>/dev/null
}
table="| model | A decode tok/s | B decode tok/s | B/A | A prefill tok/s | B prefill tok/s |"
table+=$'\n| --- | ---: | ---: | ---: | ---: | ---: |'
for name in "${names[@]}"; do
  path="$(POOT_BENCH_DIR="$W" bash bench/h200.sh path "$name")"
  [ -f "$path" ] || { echo "== $name: no model, skipped"; continue; }
  declare -A dec=() pre=()
  for round in $(seq "$ROUNDS"); do
    for side in a b; do
      j="$W/ab/$name.$side.$round.json"
      POOT_CACHE="$W/cache-$side" timeout 120 "$W/ab/poot-$side" bench "$path" --backend "${BACKEND:-ptx}" \
        --prompt-tokens "$P" --gen-tokens "$N" --repeats "$R" --json >"$j" 2>"$j.log" ||
        { echo "== $name $side round $round failed: $(tail -1 "$j.log")"; continue; }
      dec[$side]+="$(rate "$j" decode_tok_s) "
      pre[$side]+="$(rate "$j" prefill_tok_s) "
    done
  done
  best() { tr ' ' '\n' <<<"$1" | grep . | sort -g | tail -1; }
  da=$(best "${dec[a]:-}"); db=$(best "${dec[b]:-}")
  pa=$(best "${pre[a]:-}"); pb=$(best "${pre[b]:-}")
  ratio=$(python3 -c "print(f'{float(\"$db\")/float(\"$da\"):.3f}')" 2>/dev/null || echo "-")
  echo "== $name: A ${dec[a]:-} / B ${dec[b]:-}"
  table+=$'\n'"| $name | $da | $db | $ratio | $pa | $pb |"
  unset dec pre
done
echo
echo "(best of $ROUNDS rounds, each the median of $R repeats; prompt $P, $N new tokens)"
echo "$table" | tee "$OUTDIR/ab.md"
