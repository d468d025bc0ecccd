#!/usr/bin/env python3
"""Writes random PEFT LoRA adapters for the random llama fixture and their float32 references.

Reads crates/poot-models/tests/fixtures/random/llama/ (gen_random_checkpoints.py) and writes
crates/poot-models/tests/fixtures/lora/<name>/: adapter_config.json and
adapter_model.safetensors (PEFT's save_pretrained), and reference.json with the logits of
transformers + peft (float32, eager attention) with the adapter applied:

  a   r = 4, lora_alpha = 8 (scaling 2), all seven projections
      (q/k/v/o/gate/up/down_proj)
  b   r = 2, lora_alpha = 3, use_rslora (scaling 3 / sqrt(2)), q_proj, v_proj, down_proj
  qwen2, qwen3, gemma3   adapters on those families' random fixtures (random/<family>): rank 4
      on all seven projections (qwen2, qwen3), rank 2 on q/k/v/o/down (gemma3)

PEFT initialises lora_B to zeros (the adapter starts as the identity); both A and B are
re-drawn here from a seeded generator so the adapter changes the logits:
A ~ N(0, 1/sqrt(in)), B ~ N(0, 0.3).

gptq  a quantized base: gen_quantized_checkpoints.py's GPTQ llama (4-bit, group 32, its own
      dims and seed), written to lora/gptq/base/ (config.json, model.safetensors with the
      packed components), and an adapter of rank 4 on all seven projections beside it
      (lora/gptq/adapter/), its reference from transformers + peft on the dequantized weights
      (as that script's references are).

tiny-chat  two adapters for poot-serve's tiny chat model (crates/poot-serve/tests/fixtures/
      tiny-chat, it has a tokenizer, so the driver and the server run it), written to
      crates/poot-serve/tests/fixtures/tiny-chat-lora/{x,y}/: x rank 4 on all seven
      projections, y rank 8 (alpha 16) on q/k/v/o; each reference.json holds transformers +
      peft's greedy ids for a few prompts: [{"prompt_ids", "ids", "margins"}] (8 new tokens,
      margins the top-two logit gaps, checked to be clear).

reference.json has the keys of gen_random_references.py's decoder references: prompt_ids (11
seeded ids), prefill_logits (every prompt position), decode (4 greedy steps through the KV
cache, [{"input_id", "position", "logits"}]); floats rounded to 7 significant digits.

Usage: $PY scripts/ref/models/gen_lora_fixtures.py   (PY with torch, transformers and peft)
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gen_quantized_checkpoints as quantized  # noqa: E402

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
    # The other registered decoder families, on their random fixtures.
    "qwen2": dict(r=4, lora_alpha=8, target_modules=ALL, use_rslora=False, seed=3003, base="qwen2"),
    "qwen3": dict(r=4, lora_alpha=16, target_modules=ALL, use_rslora=False, seed=3004, base="qwen3"),
    "gemma3": dict(
        r=2, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"],
        use_rslora=False, seed=3005, base="gemma3",
    ),
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


def randomize(model, seed):
    """Re-draws every lora_A and lora_B (PEFT starts B at zero)."""
    g = torch.Generator().manual_seed(seed)
    for _, module in sorted(model.named_modules()):
        if not hasattr(module, "lora_A") or "default" not in module.lora_A:
            continue
        a = module.lora_A["default"].weight
        b = module.lora_B["default"].weight
        with torch.no_grad():
            a.copy_(torch.randn(a.shape, generator=g) / np.sqrt(a.shape[1]))
            b.copy_(torch.randn(b.shape, generator=g) * 0.3)
    return g


def save_adapter(model, out):
    model.save_pretrained(out)
    # No model card, and no path of this machine in the committed config.
    (out / "README.md").unlink(missing_ok=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = None
    # PEFT keeps the targets as a set: a stable order keeps the file stable.
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def gptq_case():
    rng = np.random.default_rng(4001)
    dense = quantized.dense_weights(rng)
    quantize, qconfig = quantized.LAYOUTS["gptq"]
    stored, dequantized = {}, {}
    for key, w in dense.items():
        prefix = key.removesuffix(".weight")
        if any(prefix.endswith(p) for p in quantized.PROJECTIONS):
            tensors, deq = quantize(w, rng)
            for suffix, t in tensors.items():
                stored[f"{prefix}.{suffix}"] = quantized.as_torch(t)
            dequantized[key] = deq
        else:
            stored[key] = quantized.as_torch(w)
            dequantized[key] = w
    base_dir = OUT / "gptq" / "base"
    base_dir.mkdir(parents=True, exist_ok=True)
    (base_dir / "config.json").write_text(
        json.dumps(dict(quantized.CONFIG, quantization_config=qconfig), indent=1) + "\n"
    )
    save_file({k: v.contiguous() for k, v in stored.items()}, str(base_dir / "model.safetensors"))
    skip = ("model_type", "architectures", "torch_dtype", "rope_theta")
    config = LlamaConfig(**{k: v for k, v in quantized.CONFIG.items() if k not in skip})
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in dequantized.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=ALL, lora_dropout=0.0, bias="none")
    model = get_peft_model(model, lora).eval()
    randomize(model, 4002)
    out = OUT / "gptq" / "adapter"
    save_adapter(model, out)
    ref = decoder_case(model, quantized.PROMPT)
    (out / "reference.json").write_text(json.dumps(ref) + "\n")
    print("gptq written", out)


TINY_CHAT = ROOT / "crates" / "poot-serve" / "tests" / "fixtures" / "tiny-chat"
TINY_CHAT_LORA = ROOT / "crates" / "poot-serve" / "tests" / "fixtures" / "tiny-chat-lora"
TINY_CHAT_ADAPTERS = {
    "x": dict(r=4, lora_alpha=8, target_modules=ALL, seed=5001),
    "y": dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], seed=5002),
}
TINY_CHAT_PROMPTS = [[418, 14, 451, 3], [54, 275, 223, 376, 75, 348, 354, 398, 89, 80]]
TINY_CHAT_NEW = 8


def greedy(model, prompt, n):
    ids = list(prompt)
    margins = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], margins


def tiny_chat_case():
    for name, spec in TINY_CHAT_ADAPTERS.items():
        base = AutoModelForCausalLM.from_pretrained(
            TINY_CHAT, dtype=torch.float32, attn_implementation="eager"
        )
        config = LoraConfig(
            r=spec["r"],
            lora_alpha=spec["lora_alpha"],
            target_modules=spec["target_modules"],
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, config).eval()
        randomize(model, spec["seed"])
        out = TINY_CHAT_LORA / name
        save_adapter(model, out)
        cases = []
        for prompt in TINY_CHAT_PROMPTS:
            ids, margins = greedy(model, prompt, TINY_CHAT_NEW)
            assert min(margins) > 1e-3, (name, prompt, margins)
            cases.append({"prompt_ids": prompt, "ids": ids, "margins": r7(margins)})
        (out / "reference.json").write_text(json.dumps({"greedy": cases}, indent=1) + "\n")
        print("tiny-chat", name, "written", out, "smallest margin", min(
            m for c in cases for m in c["margins"]))


def main():
    tiny_chat_case()
    gptq_case()
    for name, spec in ADAPTERS.items():
        base_dir = FIXTURES / "random" / spec["base"] if "base" in spec else BASE
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
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
        g = randomize(model, spec["seed"])
        out = OUT / name
        save_adapter(model, out)
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
