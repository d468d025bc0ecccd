#!/usr/bin/env python3
"""Computes float32 reference outputs for the random-weight fixture checkpoints.

Reads crates/poot-models/tests/fixtures/random/<name>/ (written by
gen_random_checkpoints.py) and writes reference.json next to each checkpoint.

Decoders (llama, llama3_scaled, qwen2, qwen3, gemma3, qwen2_yarn), transformers float32, eager
attention:
  prompt_ids      n = 11 seeded random ids in [0, vocab) (n = 40 for qwen2_yarn, so positions
                  pass its YaRN original_max_position_embeddings of 32)
  prefill_logits  logits of EVERY prompt position from one forward pass of the whole prompt
                  (positions 0..n-1)
  decode          4 steps; step k feeds the greedy argmax of the previous logits as one token
                  at absolute position n + k, through the KV cache of the prefill
                  [{"input_id", "position", "logits"}]
gemma3 additionally has "long": the same three keys for a 20-token prompt (longer than its
sliding window of 8), so the sliding-window mask matters. Transformers' sliding mask lets
query position q attend key positions k with q - sliding_window < k <= q (the last 8
positions, itself included).

The qwen2 checkpoint is stored in bfloat16: its references come from those bf16 weights
upcast to float32 (from_pretrained(dtype=float32)), computed in float32.

BERT ("bert", BertModel): a right-padded batch of 3 sequences with attention_mask and
token_type_ids, recording last_hidden_state of the real tokens, the pooler output, and the
masked mean-pooled, L2-normalised embeddings (sentence-transformers' mean pooling).
"bert_cross_encoder" (BertForSequenceClassification, num_labels 1): 3 [CLS] a [SEP] b [SEP]
pairs, recording the raw logits ("scores") and their sigmoid.

Floats are rounded to 7 significant digits.

Usage: PY=$(scripts/pyenv.sh); $PY scripts/ref/models/gen_random_references.py [NAME ...]
(with names, only those references are rewritten; "bert" covers both BERT fixtures)
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    BertForSequenceClassification,
    BertModel,
)

ROOT = pathlib.Path(__file__).resolve().parents[3]
RANDOM = ROOT / "crates" / "poot-models" / "tests" / "fixtures" / "random"

torch.set_num_threads(2)
torch.set_default_dtype(torch.float32)

# Appended entries keep the earlier fixtures' seeds (seed = 2000 + index).
DECODERS = ["llama", "llama3_scaled", "qwen2", "qwen3", "gemma3", "qwen2_yarn", "mixtral", "qwen3moe", "olmoe", "granite", "granitemoe"]
# Mixture-of-experts fixtures: also a long prompt, and a check that no token's top-k choice is
# a near tie (an order of summation could otherwise flip which experts run).
MOE = {"mixtral", "qwen3moe", "olmoe", "granitemoe"}
# Fixtures that also get the long prompt (longer than a prefill chunk) without a router.
LONG = {"granite"}
MIN_ROUTER_MARGIN = 1e-3
PROMPT_LEN = 11
# qwen2_yarn's prompt runs past its original_max_position_embeddings (32).
PROMPT_LENS = {"qwen2_yarn": 40}
LONG_PROMPT_LEN = 20
DECODE_STEPS = 4


def r7(x):
    """Round a nested array of floats to 7 significant digits."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return float(f"{float(a):.7g}")
    return [r7(v) for v in a]


def reference_meta(extra=""):
    return (
        f"transformers {transformers.__version__}, torch {torch.__version__}, float32, "
        f"attn_implementation=eager{extra}"
    )


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

    # Consistency check (not recorded): one uncached pass over prompt + fed tokens gives the
    # same logits as the cached decode steps.
    full_ids = list(prompt_ids) + [d["input_id"] for d in decode]
    with torch.no_grad():
        full = model(input_ids=torch.tensor([full_ids]), use_cache=False).logits[0]
    err = max(
        float((full[d["position"]] - d["logits"]).abs().max()) for d in decode
    )
    err = max(err, float((full[: len(prompt_ids)] - prefill).abs().max()))
    assert err < 1e-4, f"cached vs uncached mismatch {err}"
    return {
        "prompt_ids": list(map(int, prompt_ids)),
        "prefill_logits": r7(prefill.numpy()),
        "decode": [
            {"input_id": d["input_id"], "position": d["position"], "logits": r7(d["logits"].numpy())}
            for d in decode
        ],
    }, err


def run_decoder(name, seed):
    d = RANDOM / name
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, vocab, size=PROMPT_LENS.get(name, PROMPT_LEN)).tolist()
    case, err = decoder_case(model, prompt)
    stored = json.loads((d / "config.json").read_text()).get("dtype")
    ref = {
        "model": name,
        "architecture": model.config.architectures[0] if model.config.architectures else type(model).__name__,
        "reference": reference_meta(
            "" if stored == "float32" else f"; weights stored as {stored}, upcast to float32"
        ),
        **case,
    }
    summary = [
        f"{name}: prompt={prompt} decode={[x['input_id'] for x in case['decode']]} "
        f"logit std={np.std(case['prefill_logits']):.3f} cache-check err={err:.2e}"
    ]
    if name in MOE:
        long_prompt = rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist()
        long_case, err2 = decoder_case(model, long_prompt)
        ref["long"] = long_case
        margin, used = router_margin(model, prompt + long_prompt, model.config.num_experts_per_tok)
        assert margin > MIN_ROUTER_MARGIN, (name, margin)
        summary.append(
            f"  long: prompt={long_prompt} decode={[x['input_id'] for x in long_case['decode']]} "
            f"cache-check err={err2:.2e}; smallest top-k router margin {margin:.2e}, "
            f"experts used per layer {used}"
        )
    if name in LONG:
        long_prompt = rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist()
        long_case, err2 = decoder_case(model, long_prompt)
        ref["long"] = long_case
        summary.append(
            f"  long: prompt={long_prompt} decode={[x['input_id'] for x in long_case['decode']]} "
            f"cache-check err={err2:.2e}"
        )
    if name == "gemma3":
        long_prompt = rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist()
        long_case, err2 = decoder_case(model, long_prompt)
        ref["long"] = long_case
        # Sanity: the window changes the result on the long prompt (it must, for the
        # fixture to test it): rerun with a window covering everything.
        cfg = AutoConfig.from_pretrained(d)
        cfg.sliding_window = 4096
        wide = AutoModelForCausalLM.from_pretrained(
            d, config=cfg, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        with torch.no_grad():
            lw = wide(input_ids=torch.tensor([long_prompt])).logits[0]
        diff_tail = float((lw[-1] - torch.tensor(long_case["prefill_logits"][-1])).abs().max())
        diff_head = float((lw[7] - torch.tensor(long_case["prefill_logits"][7])).abs().max())
        assert diff_tail > 1e-2 and diff_head < 1e-4, (diff_tail, diff_head)
        summary.append(
            f"  long: prompt={long_prompt} decode={[x['input_id'] for x in long_case['decode']]} "
            f"cache-check err={err2:.2e}; window on/off max |dlogit| at pos 19 = {diff_tail:.3f}, "
            f"at pos 7 = {diff_head:.1e}"
        )
        ref["sliding_window_semantics"] = (
            "query position q attends key positions k with q - sliding_window < k <= q on "
            "sliding_attention layers; full_attention layers are plain causal"
        )
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print("\n".join(summary))


def router_margin(model, ids, k):
    """The smallest gap between the k-th and (k+1)-th router logit over every token and layer,
    and how many distinct experts each layer selects."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_router_logits=True)
    margin, used = float("inf"), []
    for logits in out.router_logits:
        top = torch.topk(logits.float(), k + 1, dim=-1)
        margin = min(margin, float((top.values[:, k - 1] - top.values[:, k]).min()))
        used.append(len(set(top.indices[:, :k].flatten().tolist())))
    return margin, used


def pad_batch(seqs, types):
    n = max(len(s) for s in seqs)
    ids = [s + [0] * (n - len(s)) for s in seqs]
    tt = [t + [0] * (n - len(t)) for t in types]
    mask = [[1] * len(s) + [0] * (n - len(s)) for s in seqs]
    return ids, mask, tt


CLS, SEP = 2, 3


def run_bert(seed):
    d = RANDOM / "bert"
    model = BertModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(seed)

    def words(n):
        return rng.integers(4, model.config.vocab_size, size=n).tolist()

    a, b = words(6), words(5)
    seqs = [
        [CLS] + a + [SEP] + b + [SEP],  # a pair: token types 0 ... 0 1 ... 1
        [CLS] + words(6) + [SEP],
        [CLS] + words(2) + [SEP],
    ]
    types = [
        [0] * (len(a) + 2) + [1] * (len(b) + 1),
        [0] * 8,
        [0, 1, 1, 0],  # arbitrary 1s inside a short sequence
    ]
    ids, mask, tt = pad_batch(seqs, types)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(tt),
        )
    h = out.last_hidden_state
    m = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
    mean = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    emb = torch.nn.functional.normalize(mean, p=2, dim=1)
    ref = {
        "model": "bert",
        "architecture": "BertModel",
        "reference": reference_meta(),
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": tt,
        "lengths": [len(s) for s in seqs],
        "last_hidden_state": [r7(h[i, : len(s)].numpy()) for i, s in enumerate(seqs)],
        "pooler_output": r7(out.pooler_output.numpy()),
        "mean_pooled_normalized": r7(emb.numpy()),
        "pooling": "mean over attention_mask == 1 tokens, then L2 normalise",
    }
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print(f"bert: lengths={ref['lengths']} emb[0][:4]={ref['mean_pooled_normalized'][0][:4]}")

    # Cross-encoder pairs.
    d = RANDOM / "bert_cross_encoder"
    model = BertForSequenceClassification.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    pairs = [(words(4), words(7)), (words(9), words(3)), (words(2), words(2))]
    seqs = [[CLS] + p + [SEP] + q + [SEP] for p, q in pairs]
    types = [[0] * (len(p) + 2) + [1] * (len(q) + 1) for p, q in pairs]
    ids, mask, tt = pad_batch(seqs, types)
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(tt),
        ).logits
    ref = {
        "model": "bert_cross_encoder",
        "architecture": "BertForSequenceClassification",
        "reference": reference_meta(),
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": tt,
        "lengths": [len(s) for s in seqs],
        "scores": r7(logits[:, 0].numpy()),
        "scores_sigmoid": r7(torch.sigmoid(logits[:, 0]).numpy()),
        "score_definition": "classifier(pooler(CLS hidden state)), pooler = tanh(dense); scores are raw logits",
    }
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print(f"bert_cross_encoder: lengths={ref['lengths']} scores={ref['scores']}")


def main():
    print(reference_meta())
    only = sys.argv[1:]
    unknown = set(only) - set(DECODERS) - {"bert"}
    if unknown:
        raise SystemExit(f"unknown fixture(s): {sorted(unknown)}")
    for i, name in enumerate(DECODERS):
        if not only or name in only:
            run_decoder(name, seed=2000 + i)
    if not only or "bert" in only:
        run_bert(seed=3000)


if __name__ == "__main__":
    sys.exit(main())
