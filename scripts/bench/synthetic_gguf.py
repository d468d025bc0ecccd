#!/usr/bin/env python3
"""Random-weight GGUF files at real dimensions, for the benchmark.

Writes a Llama-3.2-1B-shaped, Llama-3.1-8B-shaped, SmolLM2-135M-shaped, (architecture
qwen3moe) Qwen3-30B-A3B-shaped or (architecture gpt-oss) gpt-oss-20b-shaped model, or a tiny
one for tests, with random weights in F16, Q4_0, Q4_K_M or (gpt-oss) MXFP4, streaming one tensor at a time, so an 8B file needs
little host memory. Quantized blocks are random bytes with small valid f16 scales: they are not
quantized from anything, but every block decodes to finite values of a sensible size, and each
tensor has the type and size llama.cpp's quantizer would give it (Q4_K_M mixes Q4_K with Q6_K
for the output head and for attn_v / ffn_down in some layers, as llama-quant.cpp does; Q4_0
keeps a Q6_K output head; MXFP4 is gpt-oss's experts in MXFP4 as released and every other
matrix Q8_0, as ggml-org's gpt-oss GGUFs store them).

The tokenizer is a GPT-2-style byte-level BPE vocabulary of placeholder tokens: the 256 byte
tokens, a few merges, `tok<N>` placeholders up to the vocabulary size, and begin/end-of-text
control tokens at the end (as Llama 3 places them). llama.cpp and poot both load it.

Usage:
    synthetic_gguf.py --shape 1b --type f16 -o llama-1b-f16.gguf
    synthetic_gguf.py --shape 8b --type q4_k_m -o llama-8b-q4_k_m.gguf
    synthetic_gguf.py --shape tiny --type q4_0 -o tiny.gguf
    synthetic_gguf.py --shape 30b-a3b --type q4_k_m -o qwen3-30b-a3b-q4_k_m.gguf
    synthetic_gguf.py --shape gpt-oss-20b --type mxfp4 -o gpt-oss-20b-mxfp4.gguf
    synthetic_gguf.py --shape 1b --type f16 --tokenizer-from smollm2.gguf -o 1b-smol-vocab.gguf
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - a clear message instead of a traceback
    sys.exit("error: the `gguf` Python package is missing (pip install gguf)")


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied: bool
    rope_theta: float
    context: int
    # A mixture of experts (every layer): the GGUF architecture, the experts, how many a token
    # uses, each expert's FFN width; attention heads of `head_dim` with q/k norms (Qwen3).
    arch: str = "llama"
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    head_dim: int = 0


SHAPES = {
    # Llama-3.2-1B: tied embeddings.
    "1b": Shape("Llama-3.2-1B-shaped", 2048, 16, 32, 8, 8192, 128256, True, 500000.0, 8192),
    # Llama-3.1-8B: untied head.
    "8b": Shape("Llama-3.1-8B-shaped", 4096, 32, 32, 8, 14336, 128256, False, 500000.0, 8192),
    # SmolLM2-135M: tied embeddings, 64-wide heads (576 is no multiple of 256: use q4_0).
    "smollm2": Shape("SmolLM2-135M-shaped", 576, 30, 9, 3, 1536, 49152, True, 100000.0, 8192),
    # Qwen3-30B-A3B: 128 experts of 768, 8 a token, 128-wide heads (32 query, 4 key/value).
    "30b-a3b": Shape(
        "Qwen3-30B-A3B-shaped", 2048, 48, 32, 4, 6144, 151936, False, 1000000.0, 8192,
        arch="qwen3moe", experts=128, experts_used=8, expert_ffn=768, head_dim=128,
    ),
    # Small enough for tests, but every row a whole number of 256-wide K-quant super-blocks.
    "tiny": Shape("tiny-llama", 256, 2, 4, 2, 512, 1024, False, 500000.0, 512),
    # A small Qwen3-MoE (0.3 GB at Q4_K_M), for CPU runs of the routed kernels.
    "small-moe": Shape(
        "small-qwen3moe", 1024, 8, 16, 4, 2048, 32000, False, 1000000.0, 2048,
        arch="qwen3moe", experts=32, experts_used=4, expert_ffn=512, head_dim=64,
    ),
    # gpt-oss-20b: 32 experts of 2880, 4 a token, 64-wide heads (64 query, 8 key/value) with
    # biases and sinks, every other layer sliding over 128 positions, YaRN; use `--type mxfp4`.
    "gpt-oss-20b": Shape(
        "gpt-oss-20b-shaped", 2880, 24, 64, 8, 2880, 201088, False, 150000.0, 131072,
        arch="gpt-oss", experts=32, experts_used=4, expert_ffn=2880, head_dim=64,
    ),
    "tiny-gpt-oss": Shape(
        "tiny-gpt-oss", 256, 2, 4, 2, 256, 1024, False, 150000.0, 4096,
        arch="gpt-oss", experts=8, experts_used=2, expert_ffn=256, head_dim=64,
    ),
    "tiny-moe": Shape(
        "tiny-qwen3moe", 256, 2, 4, 2, 512, 1024, False, 1000000.0, 512,
        arch="qwen3moe", experts=8, experts_used=2, expert_ffn=256, head_dim=64,
    ),
}

# GGUF general.file_type values (llama.cpp's llama_ftype).
FILE_TYPES = {"f16": 1, "q4_0": 2, "q4_k_m": 15, "mxfp4": 38}

# gpt-oss: llama.cpp's `gpt-oss` keys beyond the common ones.
GPT_OSS_SLIDING_WINDOW = 128
GPT_OSS_YARN_FACTOR = 32.0
GPT_OSS_YARN_ORIGINAL_CONTEXT = 4096

Q = gguf.GGMLQuantizationType


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's choice of the layers that get more bits in a _M mix."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def tensor_type(kind: str, role: str, layer: int, shape: Shape) -> "gguf.GGMLQuantizationType":
    """The ggml type llama-quantize gives a 2-D weight of `role` for file type `kind`."""
    if kind == "f16":
        return Q.F16
    if kind == "mxfp4":
        # As ggml-org's gpt-oss GGUFs: the experts MXFP4 as released, the rest Q8_0.
        return Q.MXFP4 if role.endswith("_exps") else Q.Q8_0
    if role == "output":
        return Q.Q6_K
    if kind == "q4_0":
        return Q.Q4_0
    # q4_k_m
    if role in ("attn_v", "ffn_down") and use_more_bits(layer, shape.layers):
        return Q.Q6_K
    return Q.Q4_K


def weight_list(shape: Shape, kind: str):
    """(name, numpy shape [rows, cols], ggml type) for every tensor, in file order."""
    head_dim = shape.head_dim or shape.hidden // shape.heads
    q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
    h, f = shape.hidden, shape.ffn
    out = [("token_embd.weight", (shape.vocab, h), tensor_type(kind, "token_embd", 0, shape))]
    for i in range(shape.layers):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (h,), Q.F32),
            (p + "attn_q.weight", (q, h), tensor_type(kind, "attn_q", i, shape)),
            (p + "attn_k.weight", (kv, h), tensor_type(kind, "attn_k", i, shape)),
            (p + "attn_v.weight", (kv, h), tensor_type(kind, "attn_v", i, shape)),
            (p + "attn_output.weight", (h, q), tensor_type(kind, "attn_output", i, shape)),
        ]
        if shape.arch == "gpt-oss":
            e, ef = shape.experts, shape.expert_ffn
            out[-4:] = [
                (p + "attn_q.weight", (q, h), tensor_type(kind, "attn_q", i, shape)),
                (p + "attn_q.bias", (q,), Q.F32),
                (p + "attn_k.weight", (kv, h), tensor_type(kind, "attn_k", i, shape)),
                (p + "attn_k.bias", (kv,), Q.F32),
                (p + "attn_v.weight", (kv, h), tensor_type(kind, "attn_v", i, shape)),
                (p + "attn_v.bias", (kv,), Q.F32),
                (p + "attn_output.weight", (h, q), tensor_type(kind, "attn_output", i, shape)),
                (p + "attn_output.bias", (h,), Q.F32),
            ]
            out += [
                (p + "attn_sinks.weight", (shape.heads,), Q.F32),
                (p + "post_attention_norm.weight", (h,), Q.F32),
                (p + "ffn_gate_inp.weight", (e, h), Q.F32),
                (p + "ffn_gate_inp.bias", (e,), Q.F32),
                (p + "ffn_gate_exps.weight", (e, ef, h), tensor_type(kind, "ffn_gate_exps", i, shape)),
                (p + "ffn_gate_exps.bias", (e, ef), Q.F32),
                (p + "ffn_up_exps.weight", (e, ef, h), tensor_type(kind, "ffn_up_exps", i, shape)),
                (p + "ffn_up_exps.bias", (e, ef), Q.F32),
                (p + "ffn_down_exps.weight", (e, h, ef), tensor_type(kind, "ffn_down_exps", i, shape)),
                (p + "ffn_down_exps.bias", (e, h), Q.F32),
            ]
            continue
        if shape.experts:
            e, ef = shape.experts, shape.expert_ffn
            out += [
                (p + "attn_q_norm.weight", (head_dim,), Q.F32),
                (p + "attn_k_norm.weight", (head_dim,), Q.F32),
                (p + "ffn_norm.weight", (h,), Q.F32),
                (p + "ffn_gate_inp.weight", (e, h), Q.F32),
                (p + "ffn_gate_exps.weight", (e, ef, h), tensor_type(kind, "ffn_gate", i, shape)),
                (p + "ffn_up_exps.weight", (e, ef, h), tensor_type(kind, "ffn_up", i, shape)),
                (p + "ffn_down_exps.weight", (e, h, ef), tensor_type(kind, "ffn_down", i, shape)),
            ]
            continue
        out += [
            (p + "ffn_norm.weight", (h,), Q.F32),
            (p + "ffn_gate.weight", (f, h), tensor_type(kind, "ffn_gate", i, shape)),
            (p + "ffn_up.weight", (f, h), tensor_type(kind, "ffn_up", i, shape)),
            (p + "ffn_down.weight", (h, f), tensor_type(kind, "ffn_down", i, shape)),
        ]
    out.append(("output_norm.weight", (h,), Q.F32))
    if not shape.tied:
        out.append(("output.weight", (shape.vocab, h), tensor_type(kind, "output", 0, shape)))
    return out


def n_bytes(dims, qtype) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(dims))
    if dims[-1] % block:
        raise ValueError(f"rows of {dims[-1]} are not whole {qtype.name} blocks of {block}")
    return n // block * type_size


def f16_bytes(values: np.ndarray) -> np.ndarray:
    """Little-endian f16 words as (n, 2) bytes."""
    return values.astype("<f2").view(np.uint8).reshape(-1, 2)


def random_tensor(rng: np.random.Generator, name: str, dims, qtype, fan_in: int) -> np.ndarray:
    """A tensor's stored bytes (or values, for float types): random, with weights of about
    1/sqrt(fan_in) so activations stay of order one through the layers."""
    std = 1.0 / np.sqrt(fan_in)
    if qtype == Q.F32 and (name.endswith(".bias") or "sinks" in name):
        # Biases and attention sinks: small.
        return (0.02 * rng.standard_normal(dims, dtype=np.float32)).astype(np.float32)
    if qtype == Q.F32 and len(dims) == 2:
        # A router: logits of order one.
        return (std * rng.standard_normal(dims, dtype=np.float32)).astype(np.float32)
    if qtype == Q.F32:
        # Norm weights: near one.
        return (1.0 + 0.05 * rng.standard_normal(dims, dtype=np.float32)).astype(np.float32)
    if qtype == Q.F16:
        return (std * rng.standard_normal(dims, dtype=np.float32)).astype(np.float16)
    size = n_bytes(dims, qtype)
    blocks = np.frombuffer(rng.bytes(size), dtype=np.uint8).copy()
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    b = blocks.reshape(-1, type_size)
    nb = b.shape[0]
    scale = lambda mean: f16_bytes(mean * rng.uniform(0.5, 1.5, nb).astype(np.float32))
    if qtype == Q.Q4_0:
        # d, then 16 bytes of nibbles: w = d * (q - 8), q in 0..15 (std about 4.6 d).
        b[:, 0:2] = scale(std / 4.6)
    elif qtype == Q.Q8_0:
        # d, then 32 int8: w = d * q (std about 73.9 d).
        b[:, 0:2] = scale(std / 73.9)
    elif qtype == Q.MXFP4:
        # An E8M0 exponent e, then 16 bytes of nibbles indexing ggml's doubled E2M1 values
        # (0, 1, 2, 3, 4, 6, 8, 12 and their negatives; root mean square about 5.85):
        # w = 2^(e - 128) * value.
        e = 128 + np.round(np.log2(std / 5.85))
        b[:, 0] = (e + rng.integers(-1, 2, size=nb)).astype(np.uint8)
    elif qtype == Q.Q4_K:
        # d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles:
        # w = d * sc * q - dmin * m, sc and m in 0..63 (mean 32), q in 0..15.
        d = std / (4.6 * 32)
        b[:, 0:2] = scale(d)
        b[:, 2:4] = scale(d * 7.5)
    elif qtype == Q.Q6_K:
        # 128 bytes low bits, 64 bytes high bits, 16 int8 scales, then d:
        # w = d * scale * (q - 32), q in 0..63 (std about 18.5).
        b[:, 192:208] = rng.integers(-32, 33, size=(nb, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = scale(std / (18.5 * 18))
    else:
        raise ValueError(f"no random block recipe for {qtype.name}")
    return blocks


def add_tokenizer(w: "gguf.GGUFWriter", vocab: int) -> None:
    """A byte-level BPE vocabulary of placeholders: byte tokens, `tok<N>`, then BOS and EOS."""
    byte_chars = bytes_to_unicode()
    tokens = [byte_chars[b] for b in range(256)]
    merges = ["t o", "to k", "Ġ t", "Ġt o", "Ġto k"]
    tokens += ["to", "tok", "Ġt", "Ġto", "Ġtok"]
    n_special = 2
    while len(tokens) < vocab - n_special:
        tokens.append(f"tok{len(tokens)}")
    tokens += ["<|begin_of_text|>", "<|end_of_text|>"]
    types = [gguf.TokenType.NORMAL] * (vocab - n_special) + [gguf.TokenType.CONTROL] * n_special
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)
    w.add_add_bos_token(True)


def copy_tokenizer(w: "gguf.GGUFWriter", donor: Path) -> int:
    """Every `tokenizer.*` key of the donor GGUF (so a draft model and this one share a
    vocabulary); returns the vocabulary size."""
    reader = gguf.GGUFReader(str(donor))
    vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        w.add_key_value(name, value, vtype, sub_type=sub)
        if name == "tokenizer.ggml.tokens":
            vocab = len(value)
    if not vocab:
        raise ValueError(f"{donor} has no tokenizer.ggml.tokens")
    return vocab


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def write(path: Path, shape: Shape, kind: str, seed: int, quiet: bool, donor: Path | None) -> int:
    if donor is not None:
        # The donor's vocabulary sets the embedding and head sizes: write its keys into a
        # throwaway writer first, to learn the size before any shape is declared.
        probe = gguf.GGUFWriter(None, shape.arch)
        shape = replace(shape, vocab=copy_tokenizer(probe, donor))
    head_dim = shape.head_dim or shape.hidden // shape.heads
    w = gguf.GGUFWriter(str(path), shape.arch)
    w.add_name(f"{shape.name} random {kind.upper()}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(head_dim)
    if shape.experts:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_expert_count(shape.experts)
        w.add_expert_used_count(shape.experts_used)
        w.add_expert_feed_forward_length(shape.expert_ffn)
    if shape.arch == "gpt-oss":
        w.add_sliding_window(GPT_OSS_SLIDING_WINDOW)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(GPT_OSS_YARN_FACTOR)
        w.add_rope_scaling_orig_ctx_len(GPT_OSS_YARN_ORIGINAL_CONTEXT)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(FILE_TYPES[kind])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if donor is None:
        add_tokenizer(w, shape.vocab)
    else:
        copy_tokenizer(w, donor)

    tensors = weight_list(shape, kind)
    total = 0
    for name, dims, qtype in tensors:
        nbytes = n_bytes(dims, qtype)
        total += nbytes
        # Declared with the logical (rows, cols) shape and the ggml type.
        w.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    started = time.time()
    for i, (name, dims, qtype) in enumerate(tensors):
        data = random_tensor(rng, name, dims, qtype, fan_in=dims[-1])
        w.write_tensor_data(data)
        if not quiet and (i % 20 == 0 or i == len(tensors) - 1):
            print(f"  {i + 1}/{len(tensors)} tensors, {time.time() - started:.0f} s", file=sys.stderr)
    w.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--type", choices=sorted(FILE_TYPES), required=True)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument(
        "--layers",
        type=int,
        help="fewer (or more) layers than the shape has: a quicker file for a poot-against-poot A/B",
    )
    ap.add_argument(
        "--tokenizer-from",
        type=Path,
        help="copy this GGUF's tokenizer (and vocabulary size) instead of the placeholder one",
    )
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    if args.layers is not None:
        if args.layers < 1:
            ap.error("--layers must be at least 1")
        shape = replace(shape, layers=args.layers)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".part")
    started = time.time()
    total = write(tmp, shape, args.type, args.seed, args.quiet, args.tokenizer_from)
    tmp.replace(args.output)
    print(
        f"{args.output}: {shape.name} {args.type}, {total / 1e9:.2f} GB of weights, "
        f"{time.time() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
