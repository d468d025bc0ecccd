#!/usr/bin/env python3
"""Writes random PEFT LoRA adapters for the random llama fixture and their float32 references.

Reads crates/poot-models/tests/fixtures/random/llama/ (gen_random_checkpoints.py) and writes
crates/poot-models/tests/fixtures/lora/<name>/: adapter_config.json and
adapter_model.safetensors (PEFT's save_pretrained), and reference.json with the logits of
transformers + peft (float32, eager attention) with the adapter applied:

  a   r = 4, lora_alpha = 8 (scaling 2), all seven projections
      (q/k/v/o/gate/up/down_proj)
  b   r = 2, lora_alpha = 3, use_rslora (scaling 3 / sqrt(2)), q_proj, v_proj, down_proj

PEFT initialises lora_B to zeros (the adapter starts as the identity); both A and B are
re-drawn here from a seeded generator so the adapter changes the logits:
A ~ N(0, 1/sqrt(in)), B ~ N(0, 0.3).

reference.json has the keys of gen_random_references.py's decoder references: prompt_ids (11
seeded ids), prefill_logits (every prompt position), decode (4 greedy steps through the KV
cache, [{"input_id", "position", "logits"}]); floats rounded to 7 significant digits.

Usage: $PY scripts/ref/models/gen_lora_fixtures.py   (PY with torch, transformers and peft)
"""

import json
import os
import pathlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "crates" / "poot-models" / "tests" / "fixtures"
BASE = FIXTURES / "random" / "llama"
OUT = FIXTURES / "lora"

torch.set_num_threads(2)
torch.set_default_dtype(torch.float32)

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTERS = {
    "a": dict(r=4, lora_alpha=8, target_modules=ALL, use_rslora=False, seed=3001),
    "b": dict(r=2, lora_alpha=3, target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True, seed=3002),
}
PROMPT_LEN = 11
DECODE_STEPS = 4


def r7(x):
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return float(f"{float(a):.7g}")
    return [r7(v) for v in a]


def decoder_case(model, prompt_ids):
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    prefill = out.logits[0].float()
    pkv = out.past_key_values
    decode = []
    last = prefill[-1]
    pos = len(prompt_ids)
    for _ in range(DECODE_STEPS):
        t = int(torch.argmax(last))
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor([[t]]),
                past_key_values=pkv,
                use_cache=True,
                position_ids=torch.tensor([[pos]]),
                cache_position=torch.tensor([pos]),
            )
        pkv = out.past_key_values
        last = out.logits[0, -1].float()
        decode.append({"input_id": t, "position": pos, "logits": last})
        pos += 1
    return {
        "prompt_ids": list(map(int, prompt_ids)),
        "prefill_logits": r7(prefill.numpy()),
        "decode": [
            {"input_id": d["input_id"], "position": d["position"], "logits": r7(d["logits"].numpy())}
            for d in decode
        ],
    }


def main():
    for name, spec in ADAPTERS.items():
        base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")
        config = LoraConfig(
            r=spec["r"],
            lora_alpha=spec["lora_alpha"],
            target_modules=spec["target_modules"],
            use_rslora=spec["use_rslora"],
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, config).eval()
        g = torch.Generator().manual_seed(spec["seed"])
        for mod_name, module in sorted(model.named_modules()):
            if not hasattr(module, "lora_A") or "default" not in module.lora_A:
                continue
            a = module.lora_A["default"].weight
            b = module.lora_B["default"].weight
            with torch.no_grad():
                a.copy_(torch.randn(a.shape, generator=g) / np.sqrt(a.shape[1]))
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        # No model card, and no path of this machine in the committed config.
        (out / "README.md").unlink(missing_ok=True)
        cfg_path = out / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = "../../random/llama"
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        prompt = torch.randint(0, 256, (PROMPT_LEN,), generator=g).tolist()
        ref = decoder_case(model, prompt)
        ref["meta"] = (
            f"transformers {transformers.__version__}, peft {peft.__version__}, torch "
            f"{torch.__version__}, float32, attn_implementation=eager"
        )
        (out / "reference.json").write_text(json.dumps(ref) + "\n")
        print(name, "written", out)


if __name__ == "__main__":
    main()
