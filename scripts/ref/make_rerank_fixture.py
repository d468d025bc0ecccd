#!/usr/bin/env python3
"""Writes the tiny cross-encoder (reranker) the rerank tests run on lavapipe (software Vulkan):
crates/poot-serve/tests/fixtures/tiny-reranker/

  vocab.txt, tokenizer.json,   a WordPiece vocabulary of the test texts' words (plus single
  tokenizer_config.json,       letters), saved by transformers' BertTokenizerFast: pairs are
  special_tokens_map.json      `[CLS] query [SEP] document [SEP]` with token types 0 and 1
  config.json                  a random-weight BertForSequenceClassification with one label
  model.safetensors            (hidden 64, 2 layers, 4 heads, 64 positions), float32
  reference.json               sentence-transformers' CrossEncoder on it: `predict` of every
                               (query, document) pair with its defaults (one label: the sigmoid
                               of the logit), the raw logits, `rank` of each query's documents,
                               and the tokenizer's pair encodings

The weights are drawn wider than BERT's default initialization so the scores spread: the script
checks that neighbouring scores of each query differ by a margin a device summing in another
order cannot cross.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/make_rerank_fixture.py
"""

from __future__ import annotations

import json
import os
import pathlib
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from sentence_transformers import CrossEncoder  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "crates" / "poot-serve" / "tests" / "fixtures" / "tiny-reranker"

QUERIES = [
    {
        "query": "what do cats eat",
        "documents": [
            "cats eat fish and meat",
            "the weather is sunny today",
            "a small kitten drinks milk",
            "dogs like to run in the park",
            "paris is the capital of france",
        ],
    },
    {
        "query": "capital of france",
        "documents": [
            "berlin is in germany",
            "paris is the capital of france",
            "the river flows to the sea",
            "a cat sleeps on the warm mat",
        ],
    },
]
MIN_GAP = 1e-3


def words() -> list[str]:
    seen: list[str] = []
    for q in QUERIES:
        for text in [q["query"], *q["documents"]]:
            for w in re.findall(r"\w+|[^\w\s]", text.lower()):
                if w not in seen:
                    seen.append(w)
    return seen


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words()]
    vocab += [l for l in letters if l not in vocab] + [f"##{l}" for l in letters]
    (OUT / "vocab.txt").write_text("".join(f"{v}\n" for v in vocab))
    # BERT's uncased WordPiece pipeline, built with `tokenizers` and wrapped for transformers.
    wp = Tokenizer(models.WordPiece({v: i for i, v in enumerate(vocab)}, unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.index("[CLS]")), ("[SEP]", vocab.index("[SEP]"))],
    )
    wp.decoder = decoders.WordPiece()
    tokenizer = BertTokenizerFast(
        tokenizer_object=wp,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        model_max_length=64,
    )
    tokenizer.save_pretrained(str(OUT))

    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=1,
        initializer_range=0.2,
        architectures=["BertForSequenceClassification"],
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(OUT), safe_serialization=True)

    ce = CrossEncoder(str(OUT), device="cpu")
    cases = []
    for q in QUERIES:
        pairs = [(q["query"], d) for d in q["documents"]]
        scores = ce.predict(pairs, convert_to_numpy=True).tolist()
        logits = ce.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True).tolist()
        ranked = ce.rank(q["query"], q["documents"])
        enc = tokenizer([p[0] for p in pairs], [p[1] for p in pairs])
        ordered = sorted(scores, reverse=True)
        gaps = [a - b for a, b in zip(ordered, ordered[1:])]
        assert min(gaps) > MIN_GAP, f"scores too close: {ordered}"
        cases.append(
            {
                "query": q["query"],
                "documents": q["documents"],
                "input_ids": enc["input_ids"],
                "token_type_ids": enc["token_type_ids"],
                "scores": scores,
                "logits": logits,
                "ranking": [int(r["corpus_id"]) for r in ranked],
            }
        )
    import sentence_transformers
    import transformers

    reference = {
        "generator": f"scripts/ref/make_rerank_fixture.py: sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}, float32 CPU",
        "cases": cases,
    }
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(json.dumps(cases, indent=1))


if __name__ == "__main__":
    main()
