#!/usr/bin/env python3
"""Greedy / embedding references on the real checkpoints, computed by transformers and
sentence-transformers in float32.

Writes crates/poot-models/tests/fixtures/real/{smollm2,gemma3,minilm}.json.

SmolLM2-135M-Instruct (GGUF "llama", Q4_1) and Gemma 3 270M (GGUF "gemma3", Q4_K_M) are
loaded with transformers straight from the GGUF file
(from_pretrained(dir, gguf_file=..., dtype=float32)): transformers dequantizes every tensor
with gguf-py and maps it back to the Hugging Face layout. Two conversions of llama.cpp's
converter are undone there, and this script checks both against the raw GGUF tensors
(dequantized here with gguf-py) and records the result under "conversion_checks":
  * llama: convert_hf_to_gguf permutes the rows of Q and K (per head, from the HF
    "rotate_half" order to llama.cpp's interleaved-pair RoPE order). transformers applies the
    inverse permutation; the check re-applies llama.cpp's permutation to the loaded q_proj /
    k_proj and compares it with the GGUF tensor.
  * gemma3: convert_hf_to_gguf stores every "*norm.weight" as (w + 1), since llama.cpp's
    RMSNorm multiplies by the stored weight while Gemma's multiplies by (1 + w).
    transformers subtracts 1 again; the check compares every norm tensor.
  Both checks also compare the mean next-token NLL of a natural paragraph under the loaded
  weights with the NLL under the "wrong" convention (not undoing the permutation / keeping
  the +1), which is far worse.

Each case: prompt ids as the reference tokenizer (also from the GGUF) produced them (BOS
included when the model adds one; chat prompts rendered with apply_chat_template(...,
add_generation_prompt=True) and tokenized without adding specials again), then 24 greedy
tokens from a plain argmax loop over the KV cache (no EOS stop, no logits processors), with
per step the top-2 logit margin and the chosen token's logprob (log_softmax of the float32
logits), and the top-5 (id, logprob) of the first generated step.

The Gemma 3 GGUF (google/gemma-3-270m, the pretrained model, converted by GGUF-my-repo)
carries no tokenizer.chat_template; its chat cases use Gemma 3's published chat template
(the one in google/gemma-3-*-it tokenizer_config.json), embedded below as
GEMMA3_CHAT_TEMPLATE. Being a base model, its chat answers are weak; they are still exact
token references.

all-MiniLM-L6-v2: sentence-transformers encode(normalize_embeddings=True) of 12 sentences,
with the token ids its tokenizer produced ([CLS] ... [SEP]).

Usage: PY=$(scripts/pyenv.sh); $PY scripts/ref/models/gen_real_references.py [smollm2] [gemma3] [minilm]
"""

import json
import os
import pathlib
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
OUT = ROOT / "crates" / "poot-models" / "tests" / "fixtures" / "real"
MODELS = pathlib.Path(os.environ.get("POOT_CACHE", pathlib.Path.home() / ".cache" / "poot")) / "models"

torch.set_num_threads(2)
torch.set_default_dtype(torch.float32)

NEW_TOKENS = {"smollm2": 24, "gemma3": 24}

PARAGRAPH = (
    "The Industrial Revolution, which began in Britain in the late eighteenth century, "
    "changed the way goods were made. Factories replaced small workshops, steam engines "
    "powered new machines, and railways connected distant cities. Workers moved from the "
    "countryside to the growing towns, where living conditions were often crowded and "
    "difficult. Over the following decades,"
)

PLAIN_PROMPTS = [
    ("capital", "The capital of France is"),
    ("code", "def fibonacci(n):"),
    ("list", "Here is a list of five fruits:\n1."),
    ("paragraph", PARAGRAPH),
]

CHAT_PROMPTS = [
    ("chat_capital", [{"role": "user", "content": "What is the capital of France?"}]),
    (
        "chat_multi_turn",
        [
            {"role": "user", "content": "Hi! Can you help me with some arithmetic?"},
            {"role": "assistant", "content": "Of course. What would you like to compute?"},
            {"role": "user", "content": "What is 12 times 7?"},
        ],
    ),
    (
        "chat_system",
        [
            {"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
    ),
]

# Gemma 3's chat template, verbatim from google/gemma-3-*-it tokenizer_config.json.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)


def r7(x):
    return float(f"{float(x):.7g}")


# ----------------------------------------------------------------------------- GGUF checks


def gguf_tensors(path):
    reader = gguf.GGUFReader(path)
    return {t.name: t for t in reader.tensors}


def dequant(t):
    """Dequantized GGUF tensor as float32, shape in row-major (PyTorch) order."""
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)


def llama_cpp_permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py LlamaModel.permute (HF rows -> GGUF rows)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def mean_nll(model, ids):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    lp = torch.log_softmax(logits.float(), -1)
    return float(-lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean())


def check_llama(model, tensors, nll_ids):
    cfg = model.config
    sd = model.state_dict()
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    q_eq = k_eq = norm_eq = 0
    q_differs = True
    for i in range(cfg.num_hidden_layers):
        q_hf = sd[f"model.layers.{i}.self_attn.q_proj.weight"].numpy()
        k_hf = sd[f"model.layers.{i}.self_attn.k_proj.weight"].numpy()
        q_gg = dequant(tensors[f"blk.{i}.attn_q.weight"])
        k_gg = dequant(tensors[f"blk.{i}.attn_k.weight"])
        q_eq += np.array_equal(llama_cpp_permute(q_hf, nh, nh), q_gg)
        k_eq += np.array_equal(llama_cpp_permute(k_hf, nh, nkv), k_gg)
        q_differs &= not np.array_equal(q_hf, q_gg)
        for g, h in (("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm")):
            norm_eq += np.array_equal(
                dequant(tensors[f"blk.{i}.{g}.weight"]), sd[f"model.layers.{i}.{h}.weight"].numpy()
            )
    norm_eq += np.array_equal(dequant(tensors["output_norm.weight"]), sd["model.norm.weight"].numpy())
    emb_eq = np.array_equal(dequant(tensors["token_embd.weight"]), sd["model.embed_tokens.weight"].numpy())
    tied = "output.weight" not in tensors and model.config.tie_word_embeddings
    n = cfg.num_hidden_layers
    assert q_eq == n and k_eq == n and q_differs and norm_eq == 2 * n + 1 and emb_eq

    nll = mean_nll(model, nll_ids)
    # Wrong convention: use the GGUF Q/K rows as they are stored (not un-permuted).
    saved = {}
    with torch.no_grad():
        for i in range(n):
            for proj, gname in (("q_proj", "attn_q"), ("k_proj", "attn_k")):
                p = model.model.layers[i].self_attn.__getattr__(proj).weight
                saved[(i, proj)] = p.detach().clone()
                p.copy_(torch.from_numpy(dequant(tensors[f"blk.{i}.{gname}.weight"])))
    nll_wrong = mean_nll(model, nll_ids)
    with torch.no_grad():
        for (i, proj), w in saved.items():
            model.model.layers[i].self_attn.__getattr__(proj).weight.copy_(w)
    assert mean_nll(model, nll_ids) == nll
    return {
        "q_k_rows": (
            "GGUF attn_q/attn_k rows == llama.cpp permute(HF q_proj/k_proj rows) exactly, for "
            f"all {n} layers (permute: w.reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2); "
            f"n_head = {nh} for Q, {nkv} for K); transformers loaded the un-permuted (HF) order"
        ),
        "norm_weights": f"all {2 * n + 1} RMSNorm weights identical in GGUF and transformers (no shift)",
        "embeddings": "token_embd (Q8_0) dequantized == embed_tokens exactly; "
        + ("no output.weight in the GGUF: lm_head is tied to token_embd" if tied else "untied"),
        "paragraph_mean_nll": {"as_loaded": r7(nll), "gguf_q_k_rows_not_unpermuted": r7(nll_wrong)},
    }


GEMMA_NORMS = [
    ("attn_norm", "input_layernorm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
]


def check_gemma3(model, tensors, nll_ids):
    cfg = model.config
    sd = model.state_dict()
    n = cfg.num_hidden_layers
    norm_ok = 0
    total = 0
    examples = {}
    for i in range(n):
        for g, h in GEMMA_NORMS:
            gg = dequant(tensors[f"blk.{i}.{g}.weight"])
            hf = sd[f"model.layers.{i}.{h}.weight"].numpy()
            norm_ok += np.array_equal(gg - np.float32(1.0), hf)
            total += 1
            if i == 0:
                examples[f"blk.0.{g}.weight[:4]"] = {
                    "gguf": [r7(v) for v in gg[:4]],
                    "transformers": [r7(v) for v in hf[:4]],
                }
    gg = dequant(tensors["output_norm.weight"])
    norm_ok += np.array_equal(gg - np.float32(1.0), sd["model.norm.weight"].numpy())
    total += 1
    qk_same = 0
    for i in range(n):
        for gname, h in (("attn_q", "q_proj"), ("attn_k", "k_proj")):
            qk_same += np.array_equal(
                dequant(tensors[f"blk.{i}.{gname}.weight"]), sd[f"model.layers.{i}.self_attn.{h}.weight"].numpy()
            )
    emb_eq = np.array_equal(dequant(tensors["token_embd.weight"]), sd["model.embed_tokens.weight"].numpy())
    assert norm_ok == total and qk_same == 2 * n and emb_eq, (norm_ok, total, qk_same, emb_eq)

    nll = mean_nll(model, nll_ids)
    norms = [p for name, p in model.named_parameters() if name.endswith("norm.weight")]
    with torch.no_grad():
        for p in norms:
            p.add_(1.0)
    nll_wrong = mean_nll(model, nll_ids)
    with torch.no_grad():
        for p in norms:
            p.sub_(1.0)
    return {
        "norm_weights": (
            f"all {total} '*norm.weight' tensors (attn_norm, post_attention_norm, ffn_norm, "
            "post_ffw_norm, attn_q_norm, attn_k_norm per layer, output_norm) satisfy "
            "transformers == GGUF - 1 exactly: the GGUF stores Gemma's (1 + w), transformers "
            "holds w and its Gemma3RMSNorm scales by (1 + w)"
        ),
        "norm_examples": examples,
        "q_k_rows": f"GGUF attn_q/attn_k == transformers q_proj/k_proj exactly in all {n} layers: "
        "no permutation for gemma3 (llama.cpp runs it with NEOX-style RoPE)",
        "embeddings": "token_embd (Q8_0) dequantized == embed_tokens exactly; tied lm_head; "
        f"transformers scales embeddings by sqrt(hidden_size) = {r7(cfg.hidden_size ** 0.5)} (float32)",
        "paragraph_mean_nll": {"as_loaded": r7(nll), "norm_weights_kept_plus_one": r7(nll_wrong)},
    }


# ----------------------------------------------------------------------------- generation


def greedy(model, ids, n_new):
    """Plain greedy loop over the KV cache, float32, no EOS stop."""
    cache = None
    inp = torch.tensor([ids])
    out_ids, margins, logprobs = [], [], []
    top5 = None
    pos = 0
    with torch.no_grad():
        for step in range(n_new):
            out = model(input_ids=inp, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1].float()
            lp = torch.log_softmax(logits, -1)
            top = torch.topk(logits, 5)
            t = int(top.indices[0])
            if step == 0:
                top5 = [[int(i), r7(lp[i])] for i in top.indices]
            out_ids.append(t)
            margins.append(r7(top.values[0] - top.values[1]))
            logprobs.append(r7(lp[t]))
            pos += inp.shape[1]
            inp = torch.tensor([[t]])
    return out_ids, margins, logprobs, top5


def run_decoder(key, file, chat_template=None, chat_template_source=None):
    t0 = time.time()
    path = MODELS / file
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=file)
    if tok.chat_template is None:
        tok.chat_template = chat_template
    else:
        chat_template_source = "tokenizer.chat_template of the GGUF"
    model = AutoModelForCausalLM.from_pretrained(
        MODELS, gguf_file=file, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    print(f"[{key}] loaded in {time.time() - t0:.0f}s", flush=True)
    tensors = gguf_tensors(str(path))
    nll_ids = tok(PARAGRAPH).input_ids
    if model.config.model_type == "llama":
        checks = check_llama(model, tensors, nll_ids)
    else:
        checks = check_gemma3(model, tensors, nll_ids)
    print(f"[{key}] conversion checks: {json.dumps(checks['paragraph_mean_nll'])}", flush=True)

    cases = []
    prompts = [(n, p, False) for n, p in PLAIN_PROMPTS] + [(n, m, True) for n, m in CHAT_PROMPTS]
    for name, prompt, chat in prompts:
        if chat:
            text = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False).input_ids
            again = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
            if hasattr(again, "keys"):
                again = again["input_ids"]
            assert list(again) == list(ids), (again, ids)
        else:
            text = prompt
            ids = tok(text).input_ids
        gen, margins, logprobs, top5 = greedy(model, ids, NEW_TOKENS[key])
        decoded = tok.decode(gen)
        case = {
            "name": name,
            "chat": chat,
            "prompt_text": text,
            "prompt_ids": list(map(int, ids)),
            "greedy_ids": gen,
            "greedy_text": decoded,
            "margins": margins,
            "logprobs": logprobs,
            "first_top5": top5,
        }
        if chat:
            case["messages"] = prompt
        cases.append(case)
        print(
            f"[{key}] {name}: {len(ids)} prompt ids, min margin {min(margins):.3f}\n"
            f"    {text!r}\n => {decoded!r}",
            flush=True,
        )

    ref = {
        "model": file,
        "reference": f"transformers {transformers.__version__} float32 on gguf-dequantized weights "
        f"(gguf-py {gguf_version()}, torch {torch.__version__}, attn_implementation=eager)",
        "tokenizer": "transformers tokenizer built from the GGUF (AutoTokenizer.from_pretrained(gguf_file=...))",
        "add_bos": bool(tok("a").input_ids[0] == tok.bos_token_id) if tok.bos_token_id is not None else False,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "chat_template_source": chat_template_source,
        "greedy": "argmax of float32 logits at each step over the KV cache; no EOS stop, no logits processors",
        "config": {
            k: v
            for k, v in model.config.to_dict().items()
            if k
            in (
                "model_type",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "rms_norm_eps",
                "rope_parameters",
                "sliding_window",
                "layer_types",
                "query_pre_attn_scalar",
                "tie_word_embeddings",
                "hidden_act",
                "hidden_activation",
                "final_logit_softcapping",
                "attn_logit_softcapping",
            )
        },
        "conversion_checks": checks,
        "cases": cases,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{key}.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"[{key}] done in {time.time() - t0:.0f}s", flush=True)


def gguf_version():
    from importlib.metadata import version

    return version("gguf")


# ----------------------------------------------------------------------------- MiniLM

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaped over a sleepy hound.",
    "Paris is the capital and most populous city of France.",
    "How do I reset my password?",
    "I forgot the password to my account and need to change it.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "def add(a, b): return a + b",
    "The stock market fell 3.5% on Tuesday after the interest-rate announcement.",
    "Café crème, naïve résumé — ünïcödé and emoji 🙂 handling!",
    "short",
    "UPPERCASE AND lowercase Mixed CaSe words",
    "In 1969, Neil Armstrong became the first person to walk on the Moon, an event watched "
    "by hundreds of millions of people on television around the world, and it remains one "
    "of the defining moments of the twentieth century.",
]


def run_minilm():
    from importlib.metadata import version

    from sentence_transformers import SentenceTransformer

    d = MODELS / "all-minilm-l6-v2"
    st = SentenceTransformer(str(d), device="cpu")
    emb = st.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True, batch_size=16)
    enc = st.tokenizer(SENTENCES, truncation=True, max_length=st.max_seq_length)
    ids = [list(map(int, x)) for x in enc["input_ids"]]
    # Cross-check: one sentence at a time (no padding) gives the same embedding.
    single = np.stack([st.encode([s], normalize_embeddings=True)[0] for s in SENTENCES])
    err = float(np.abs(single - emb).max())
    assert err < 1e-5, err
    sims = emb @ emb.T
    print(f"[minilm] dim={emb.shape[1]} batch-vs-single err={err:.1e}")
    print(f"[minilm] cos(fox, fox')={sims[0, 1]:.3f} cos(password, password')={sims[3, 4]:.3f} cos(fox, password)={sims[0, 3]:.3f}")
    ref = {
        "model": "all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2, safetensors)",
        "reference": f"sentence-transformers {version('sentence-transformers')}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}, float32",
        "pipeline": "BertModel -> mean pooling over attention_mask -> L2 normalize "
        f"(encode(normalize_embeddings=True)); max_seq_length {st.max_seq_length}; token_type_ids all 0",
        "sentences": SENTENCES,
        "input_ids": ids,
        "embeddings": [[r7(v) for v in row] for row in emb],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "minilm.json").write_text(json.dumps(ref, separators=(",", ":"), ensure_ascii=False) + "\n")


def main(argv):
    which = argv[1:] or ["smollm2", "gemma3", "minilm"]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, gguf {gguf_version()}")
    for w in which:
        if w == "smollm2":
            run_decoder("smollm2", "smollm2-135m-instruct-q4_1.gguf")
        elif w == "gemma3":
            run_decoder(
                "gemma3",
                "gemma3-270m-q4_k_m.gguf",
                chat_template=GEMMA3_CHAT_TEMPLATE,
                chat_template_source=(
                    "the GGUF has no tokenizer.chat_template (base google/gemma-3-270m); used Gemma 3's "
                    "published template from google/gemma-3-*-it tokenizer_config.json"
                ),
            )
        elif w == "minilm":
            run_minilm()
        else:
            raise SystemExit(f"unknown model {w}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
