"""Reference token ids and decodes for poot-text's tokenizer tests.

GGUF vocabularies: llama.cpp itself (through llama-cpp-python's ctypes bindings, the model
loaded with vocab_only=True), so the reference is the implementation whose algorithms
poot-text reimplements. tokenizer.json: the Python `tokenizers` package.

For every corpus string it records
  special: encode(text, add_special=True,  parse_special=True)
  plain:   encode(text, add_special=False, parse_special=False)
and the decodes of `special` with special tokens rendered (`decoded`) and skipped
(`decoded_skip`). GGUF references also record a sample of token_to_piece results, the special
ids and the end-of-generation set.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/tokenizer_refs.py [smollm2 gemma3 minilm pre-variants space-prefix]
Models come from ${POOT_CACHE:-~/.cache/poot}/models (scripts/fetch-models.sh).
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text_corpus import FIXTURES, corpus  # noqa: E402

MODELS = pathlib.Path(os.environ.get("POOT_CACHE", pathlib.Path.home() / ".cache" / "poot")) / "models"


def write(name: str, doc: dict) -> None:
    path = FIXTURES / name
    path.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def vocab_only_copy(src_name: str, dest: pathlib.Path, overrides: dict) -> None:
    """Writes a tensor-free GGUF with `src_name`'s metadata and the `overrides` keys changed,
    so llama.cpp can be asked how another tokenizer setting treats the same vocabulary."""
    import gguf

    reader = gguf.GGUFReader(str(MODELS / src_name))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dest), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = overrides.get(key, field.contents())
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gguf_refs(file_name: str, out_name: str, model_path: pathlib.Path | None = None, pre: str | None = None) -> None:
    import llama_cpp as ll

    ll.llama_backend_init()
    # Silence llama.cpp's loader log.
    log_cb = ll.llama_log_callback(lambda level, text, user: None)
    ll.llama_log_set(log_cb, ctypes.c_void_p(0))

    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(model_path or MODELS / file_name).encode(), params)
    if not model:
        raise SystemExit(f"llama.cpp could not load {file_name}")
    vocab = ll.llama_model_get_vocab(model)
    n_vocab = ll.llama_vocab_n_tokens(vocab)

    def tokenize(text: str, add_special: bool, parse_special: bool) -> list[int]:
        raw = text.encode()
        cap = len(raw) * 2 + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError(f"tokenize overflow for {text!r}")
        return list(buf[:n])

    def detokenize(ids: list[int], unparse_special: bool) -> bytes:
        arr = (ll.llama_token * max(1, len(ids)))(*ids)
        cap = 64 + 64 * len(ids)
        buf = ctypes.create_string_buffer(cap)
        n = ll.llama_detokenize(vocab, arr, len(ids), buf, cap, False, unparse_special)
        if n < 0:
            raise RuntimeError("detokenize overflow")
        return buf.raw[:n]

    def piece(tok: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(512)
        n = ll.llama_token_to_piece(vocab, tok, buf, 512, 0, special)
        if n < 0:
            raise RuntimeError("piece overflow")
        return buf.raw[:n]

    cases = []
    for text in corpus():
        special = tokenize(text, True, True)
        plain = tokenize(text, False, False)
        cases.append(
            {
                "text": text,
                "special": special,
                "plain": plain,
                # Bytes as hex: a decode need not be valid UTF-8.
                "decoded_hex": detokenize(special, True).hex(),
                "decoded_skip_hex": detokenize(special, False).hex(),
                "plain_decoded_hex": detokenize(plain, False).hex(),
            }
        )

    # Pieces do not depend on the pre-tokenizer: the variants skip them.
    sample = [] if pre else sorted(set(range(min(n_vocab, 400))) | set(range(0, n_vocab, 97)) | {n_vocab - 1})
    pieces = [
        {"id": t, "special_hex": piece(t, True).hex(), "plain_hex": piece(t, False).hex()} for t in sample
    ]

    def opt(tok: int) -> int | None:
        return None if tok < 0 else tok

    doc = {
        "reference": f"llama.cpp via llama-cpp-python {ll.__version__}, vocab_only",
        "model": file_name,
        "variant": pre,
        "n_vocab": n_vocab,
        "bos": opt(ll.llama_vocab_bos(vocab)),
        "eos": opt(ll.llama_vocab_eos(vocab)),
        "eot": opt(ll.llama_vocab_eot(vocab)),
        "pad": opt(ll.llama_vocab_pad(vocab)),
        "add_bos": bool(ll.llama_vocab_get_add_bos(vocab)),
        "eog": [t for t in range(n_vocab) if ll.llama_vocab_is_eog(vocab, t)],
        "cases": cases,
        "pieces": pieces,
    }
    ll.llama_model_free(model)
    write(out_name, doc)


def minilm_refs() -> None:
    import tokenizers

    path = MODELS / "all-minilm-l6-v2" / "tokenizer.json"
    parse = tokenizers.Tokenizer.from_file(str(path))
    plain = tokenizers.Tokenizer.from_file(str(path))
    plain.encode_special_tokens = True
    # poot-text encodes one text whole: padding and truncation belong to the batching layer
    # (transformers likewise leaves them off unless asked).
    for t in (parse, plain):
        t.no_padding()
        t.no_truncation()
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
    doc = {
        "reference": f"python tokenizers {tokenizers.__version__}",
        "model": "all-minilm-l6-v2/tokenizer.json",
        "n_vocab": parse.get_vocab_size(with_added_tokens=True),
        "cases": cases,
    }
    write("minilm_tokenizer_ref.json", doc)


if __name__ == "__main__":
    which = sys.argv[1:] or ["smollm2", "gemma3", "minilm", "pre-variants", "space-prefix"]
    for w in which:
        if w == "smollm2":
            gguf_refs("smollm2-135m-instruct-q4_1.gguf", "smollm2_gguf_tokenizer_ref.json")
        elif w == "gemma3":
            gguf_refs("gemma3-270m-q4_k_m.gguf", "gemma3_gguf_tokenizer_ref.json")
        elif w == "minilm":
            minilm_refs()
        elif w == "space-prefix":
            # Gemma 3's SentencePiece vocabulary with add_space_prefix on (Llama 2 style):
            # covers the leading-"▁" rule on encode and its removal on decode.
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                path = pathlib.Path(tmp) / "gemma3-prefix.gguf"
                vocab_only_copy("gemma3-270m-q4_k_m.gguf", path, {"tokenizer.ggml.add_space_prefix": True})
                gguf_refs("gemma3-270m-q4_k_m.gguf", "gemma3_vocab_space_prefix_ref.json", path, "space-prefix")
        elif w == "pre-variants":
            # SmolLM2's byte-level vocabulary under other pre-tokenizers: covers the common
            # llama3 / qwen2 / gpt-2 families (and their ignore_merges / clean_spaces flags).
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                for pre in ["llama3", "qwen2", "gpt-2", "default", "deepseek-v3", "gpt-4o", "tekken", "stablelm2"]:
                    path = pathlib.Path(tmp) / f"{pre}.gguf"
                    vocab_only_copy("smollm2-135m-instruct-q4_1.gguf", path, {"tokenizer.ggml.pre": pre})
                    gguf_refs("smollm2-135m-instruct-q4_1.gguf", f"smollm2_vocab_pre_{pre}_ref.json", path, pre)
        else:
            raise SystemExit(f"unknown reference set {w!r}")
