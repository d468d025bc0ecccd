#!/usr/bin/env bash
# Call C (carries .bench/c3): SmolLM2 joined, its 1B-shaped partner written in the background;
# the shared suite on PTX with library contractions on (lib=1); SmolLM2's prompts with lib=1;
# prefill and decode A/B of lib=0 against lib=1 on the models written so far (poot alone).
source .bench/s11/common.sh
cat .bench/c3/poot.commit
for f in poot poot-serve greedy_check; do xz -dc ".bench/c3/$f.xz" >"$W/bin/$f"; chmod +x "$W/bin/$f"; done
bash bench/h200.sh models smollm2 >/dev/null 2>&1; S="$W/models/smollm2-135m-instruct-q4_1.gguf"; ls -la "$S"
(setsid nohup bash bench/h200.sh models llama1b-smolvocab >"$W/models-smol.log" 2>&1 &)
echo "== suite, lib=1"
POOT_TUNING=lib=1 timeout 200 "$W/bin/greedy_check" ptx --suite-only 2>&1 | grep -E "^FAIL|^suite:|panick|error" | head -20
echo "== SmolLM2 committed prompts, lib=1"
POOT_TUNING=lib=1 timeout 100 "$W/bin/greedy_check" ptx "$S" crates/poot-models/tests/fixtures/real/smollm2.json 2>&1 | tail -4
echo "== prefill/decode A/B: lib=0 vs lib=1 (pp512 tg64, 2 repeats)"
for m in smollm2-135m-instruct-q4_1 llama-1b-f16 llama-1b-q4_0 llama-8b-q4_k_m; do
  M="$W/models/$m.gguf"; [ -f "$M" ] || { echo "$m: not written yet"; continue; }
  for t in lib=0 lib=1; do
    echo "$m [$t] $(POOT_TUNING="$t" timeout 120 "$W/bin/poot" bench "$M" --backend ptx --prompt-tokens 512 --gen-tokens 64 --repeats 2 2>&1 | grep -E "^(prefill|decode) |rror" | tr -s ' ' | tr '\n' ' ')"
  done
done
echo "build: $(tail -1 "$W/build.log")"; echo "models: $(tail -1 "$W/models-1b.log") / $(tail -1 "$W/models-8b.log") / $(tail -1 "$W/models-8b16.log") / $(tail -1 "$W/models-smol.log")"
date -u
