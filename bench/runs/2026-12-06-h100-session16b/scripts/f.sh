#!/usr/bin/env bash
# Call F (fresh machine; carries .bench/c8: poot at the staging fix, profile, greedy_check, the
# gguf wheel; .bench/q0: llama.cpp's source): llama.cpp built and three models written in the
# background; the shared suite on PTX with block weights in the library from 16 rows (under
# the suite's bound for steps rounded to f16); 1B F16 prefill with the matrix units'
# attention off and on.
set -uo pipefail
exec > >(tee -a "$OUT/f.log") 2>&1
source .bench/s16/env.sh
cat .bench/c8/poot.commit
mkdir -p .bench/c1 && cp .bench/q0/llama.cpp.tar.xz .bench/c1/
(BUILD_SECONDS=1500 setsid nohup nice -n 10 bash bench/h200.sh build >"$W/build.log" 2>&1 &)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .bench/c8/gguf-*.whl
mkdir -p "$W/scripts" && cp scripts/bench/synthetic_gguf.py "$W/scripts/"
cat >"$W/write.sh" <<'EOS'
for spec in "$@"; do read -r name shape kind <<<"$spec"
  [ -f "$W/models/$name.gguf" ] || PYTHONPATH="$W/site" nice python3 "$W/scripts/synthetic_gguf.py" --shape "$shape" --type "$kind" -q -o "$W/models/$name.gguf" >"$W/$name.log" 2>&1
done
EOS
export W
(setsid nohup bash "$W/write.sh" "llama-1b-f16 1b f16" "llama-8b-q4_k_m 8b q4_k_m" >/dev/null 2>&1 &)
(setsid nohup bash "$W/write.sh" "llama-8b-f16 8b f16" >/dev/null 2>&1 &)
unpack .bench/c8/*.xz
echo "== suite on PTX, lib_rows=16 $(date -u +%T)"
POOT_TUNING=lib_rows=16 timeout 240 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "^FAIL|^suite:|matrix units|rror" | head -30
wait_model "$M1" 100 && for t in attn_mma=0 ""; do pp "$M1" "$t"; done
ls -la "$W/models"; echo "build: $(tail -1 "$W/build.log")"; date -u
