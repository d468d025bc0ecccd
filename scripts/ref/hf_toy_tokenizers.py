"""Two small tokenizer.json files trained on the test corpus, plus their references, so the
tokenizer.json path is tested on the two decoder pipelines chat models use besides WordPiece:

  bytelevel: GPT-2/Llama-3 style byte-level BPE (Llama 3 split regex, ByteLevel decoder, a
             TemplateProcessing BOS), special tokens <|begin_of_text|> <|im_start|> <|im_end|>.
  metaspace: Llama-2/Mistral style SentencePiece BPE (Metaspace pre-tokenizer prepending "▁"
             to the first split only, byte fallback through <0xNN> tokens, the
             Replace/ByteFallback/Fuse/Strip decoder), special tokens <s> </s> <unk>
             [INST] [/INST].

Reference: the Python `tokenizers` package, which also trained them (vocabularies of a few
hundred tokens, so the files stay small). Output: crates/poot-text/tests/fixtures/
toy_{name}_tokenizer.json and toy_{name}_ref.json.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/hf_toy_tokenizers.py
"""

from __future__ import annotations

import json
import pathlib
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text_corpus import FIXTURES, corpus  # noqa: E402

LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def bytelevel() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus() * 3, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))]
    )
    return tok


def metaspace() -> Tokenizer:
    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    seed = Tokenizer(models.BPE(unk_token="<unk>"))
    seed.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, limit_alphabet=150, show_progress=False)
    seed.train_from_iterator(corpus() * 3, trainer)
    model = json.loads(seed.to_str())["model"]
    vocab = dict(model["vocab"])
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(specials)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def refs(name: str, tok: Tokenizer) -> None:
    path = FIXTURES / f"toy_{name}_tokenizer.json"
    tok.save(str(path))
    parse = Tokenizer.from_file(str(path))
    plain = Tokenizer.from_file(str(path))
    plain.encode_special_tokens = True
    cases = []
    for text in corpus():
        special = parse.encode(text, add_special_tokens=True).ids
        plain_ids = plain.encode(text, add_special_tokens=False).ids
        cases.append(
            {
                "text": text,
                "special": special,
                "plain": plain_ids,
                "decoded": parse.decode(special, skip_special_tokens=False),
                "decoded_skip": parse.decode(special, skip_special_tokens=True),
                "plain_decoded": parse.decode(plain_ids, skip_special_tokens=True),
            }
        )
    doc = {"reference": "python tokenizers (trained by scripts/ref/hf_toy_tokenizers.py)", "cases": cases}
    out = FIXTURES / f"toy_{name}_ref.json"
    out.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes), {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    refs("bytelevel", bytelevel())
    refs("metaspace", metaspace())
