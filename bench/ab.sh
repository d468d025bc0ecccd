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
# (ptx; wgpu for a dry run on lavapipe), VARIANTS (default `a b`: each a side, optionally with a
# POOT_TUNING spec for it, e.g. `a b b:bytes=64 b:shuffle=0`; the first is the baseline).
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
  for f in poot greedy_check profile; do
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
best() { tr ' ' '\n' <<<"$1" | grep . | sort -g | tail -1; }
# Variants: a side (a or b), optionally with a POOT_TUNING spec (`b:bytes=64,shuffle=0`).
read -r -a variants <<<"${VARIANTS:-a b}"
header="| model |"
rule="| --- |"
for v in "${variants[@]}"; do
  header+=" $v decode |"
  rule+=" ---: |"
done
for v in "${variants[@]:1}"; do
  header+=" $v / ${variants[0]} |"
  rule+=" ---: |"
done
for v in "${variants[@]}"; do
  header+=" $v prefill |"
  rule+=" ---: |"
done
table="$header"$'\n'"$rule"
for name in "${names[@]}"; do
  path="$(POOT_BENCH_DIR="$W" bash bench/h200.sh path "$name")"
  [ -f "$path" ] || { echo "== $name: no model, skipped"; continue; }
  declare -A dec=() pre=()
  for round in $(seq "$ROUNDS"); do
    for i in "${!variants[@]}"; do
      v="${variants[$i]}"
      side="${v%%:*}"
      tuning=""
      [[ "$v" == *:* ]] && tuning="${v#*:}"
      j="$W/ab/$name.$i.$round.json"
      POOT_TUNING="$tuning" POOT_CACHE="$W/cache-$side" timeout 150 "$W/ab/poot-$side" bench "$path" \
        --backend "${BACKEND:-ptx}" --prompt-tokens "$P" --gen-tokens "$N" --repeats "$R" --json \
        >"$j" 2>"$j.log" || { echo "== $name $v round $round failed: $(tail -1 "$j.log")"; continue; }
      dec[$i]+="$(rate "$j" decode_tok_s) "
      pre[$i]+="$(rate "$j" prefill_tok_s) "
    done
  done
  row="| $name |"
  first=""
  for i in "${!variants[@]}"; do
    d=$(best "${dec[$i]:-}")
    [ "$i" = 0 ] && first="$d"
    row+=" ${d:--} |"
    echo "== $name ${variants[$i]}: ${dec[$i]:-}"
  done
  for i in "${!variants[@]}"; do
    [ "$i" = 0 ] && continue
    d=$(best "${dec[$i]:-}")
    row+=" $(python3 -c "print(f'{float(\"$d\")/float(\"$first\"):.3f}')" 2>/dev/null || echo -) |"
  done
  for i in "${!variants[@]}"; do
    row+=" $(best "${pre[$i]:-}") |"
  done
  table+=$'\n'"$row"
  unset dec pre
done
echo
echo "(best of $ROUNDS rounds, each the median of $R repeats; prompt $P, $N new tokens)"
echo "$table" | tee "$OUTDIR/ab.md"
