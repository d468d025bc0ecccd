#!/usr/bin/env python3
"""Writes the tiny chat model poot-serve's tests run on lavapipe (software Vulkan), where a real
checkpoint is far too slow: crates/poot-serve/tests/fixtures/tiny-chat/

  tokenizer.json         byte-level BPE (Llama-3 split regex), 512 ids, trained by `tokenizers`
                         on the tokenizer test corpus; specials <|endoftext|> <|im_start|> <|im_end|>
  tokenizer_config.json  the specials and a ChatML chat template (system, user, assistant with
                         tool_calls, tool messages, a tools list in the system turn)
  config.json            a random-weight Llama (hidden 64, 2 layers, 4 heads / 2 KV heads), saved
  model.safetensors      by transformers' save_pretrained in float32
  reference.json         independent references for the tests: token ids of a few texts
                         (`tokenizers`), a conversation with tools rendered by transformers'
                         apply_chat_template (jinja2), and transformers' greedy tokens and text
                         for a few prompts (float32, eager attention)

The weights are seeded and scaled so greedy decoding moves from token to token, and the
lm_head rows of the three special tokens are zero: their logit is 0 while the best ordinary
token's is well above it, so the model never ends a turn by itself and a greedy answer always
runs to max_tokens (tests of the end-of-turn path use stop strings).

The script checks that greedy decoding in transformers has a clear margin between the best and
second-best logit on a few prompts, so a device that sums in another order picks the same
tokens.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/make_serve_fixture.py
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from text_corpus import corpus  # noqa: E402

ROOT = HERE.parents[1]
OUT = ROOT / "crates" / "poot-serve" / "tests" / "fixtures" / "tiny-chat"

LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 512

# ChatML, as SmolLM2/Qwen write it: a tools list goes into the system turn, an assistant's
# tool calls are <tool_call> JSON lines, and tool results come back in a `tool` turn.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- 'You may call these tools:\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson + '\\n' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- if not loop.first %}{{- raise_exception('the system message must come first') }}{%- endif %}"
    "{%- elif message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- set f = call.function if call.function is defined else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>tool\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- raise_exception('unknown role: ' + message.role) }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


GREEDY_TOKENS = 16
ENCODE_TEXTS = ["Hello, world!", "The quick brown fox", " leading  spaces\n", "<|im_start|>user\nHi<|im_end|>\n", "naïve café 😀"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"},
    {"role": "assistant", "content": "It is 21 degrees."},
    {"role": "user", "content": "Thanks <|im_end|> bye"},
]


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() * 3, trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"trained {tok.get_vocab_size()} ids, wanted {VOCAB}")
    return tok


def make_model(specials: list[int]) -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=None,
        eos_token_id=[specials[0], specials[2]],
        pad_token_id=specials[0],
    )
    torch.manual_seed(7)
    model = LlamaForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.startswith("lm_head"):
                p.copy_(torch.randn(p.shape, generator=g))
                p[specials] = 0.0
            else:
                gain = 2.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * gain / math.sqrt(p.shape[1]))
    return model


def greedy_margins(model: LlamaForCausalLM, ids: list[int], steps: int) -> tuple[list[int], float]:
    """Greedy tokens after `ids` and the smallest gap between the best two logits."""
    seq = list(ids)
    smallest = math.inf
    out = []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2)
            smallest = min(smallest, float(top.values[0] - top.values[1]))
            out.append(int(top.indices[0]))
            seq.append(out[-1])
    return out, smallest


def main() -> None:
    torch.set_num_threads(2)
    tok = train_tokenizer()
    specials = [tok.token_to_id(s) for s in SPECIALS]
    model = make_model(specials)

    OUT.mkdir(parents=True, exist_ok=True)
    for f in OUT.iterdir():
        f.unlink()
    model.save_pretrained(OUT)
    (OUT / "generation_config.json").unlink(missing_ok=True)
    cfg_path = OUT / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("_name_or_path", None)
    cfg["rope_theta"] = 10000.0
    cfg["torch_dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok.save(str(OUT / "tokenizer.json"))
    tok_config = {
        "added_tokens_decoder": {
            str(i): {"content": s, "special": True, "lstrip": False, "rstrip": False,
                     "normalized": False, "single_word": False}
            for i, s in zip(specials, SPECIALS)
        },
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 512,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")

    hf = PreTrainedTokenizerFast.from_pretrained(OUT)
    chat = {"messages": CONVERSATION, "tools": TOOLS}
    chat["text"] = hf.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    simple = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    simple_text = hf.apply_chat_template(simple, tokenize=False, add_generation_prompt=True)
    reference = {
        "encode": [{"text": t, "ids": tok.encode(t).ids} for t in ENCODE_TEXTS],
        "chat": chat,
        "greedy": [],
    }
    worst = math.inf
    for prompt, messages in [
        ("Hello, world!", None),
        ("The quick brown fox", None),
        ("1234567890", None),
        (simple_text, simple),
    ]:
        ids = tok.encode(prompt).ids
        out, margin = greedy_margins(model, ids, GREEDY_TOKENS)
        worst = min(worst, margin)
        if any(t in specials for t in out):
            raise SystemExit(f"greedy decoding of {prompt!r} produced a special token: {out}")
        case = {"prompt": prompt, "prompt_ids": ids, "ids": out, "text": tok.decode(out), "margin": margin}
        if messages is not None:
            case["messages"] = messages
        reference["greedy"].append(case)
        print(f"{prompt!r}: {len(ids)} ids -> {tok.decode(out)!r} (margin {margin:.3f})")
    if worst < 2e-2:
        raise SystemExit(f"smallest greedy margin {worst:.4f} is too small for a device comparison")
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1, ensure_ascii=False) + "\n")
    files = {f.name: f.stat().st_size for f in sorted(OUT.iterdir())}
    print(f"wrote {OUT}: {files}; smallest greedy margin {worst:.3f}")


if __name__ == "__main__":
    main()
