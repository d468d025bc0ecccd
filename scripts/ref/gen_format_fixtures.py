#!/usr/bin/env python3
"""Writes the reference fixtures poot-formats' tests compare its decodes against.

Everything here is an independent reference, never poot's own output:

- GGUF block formats: random blocks decoded by gguf-py (`gguf.quants.dequantize`, numpy), one
  file per format under tests/fixtures/gguf_blocks/. "Tame" blocks are random bytes whose f16
  scale fields (and MXFP4's E8M0 exponent) are set to finite values in a realistic range;
  "wild" blocks are unconstrained random bytes (plus forced inf/NaN/subnormal/zero scales), whose
  non-finite results check that NaN positions match.
- Hugging Face packed layouts (GPTQ with and without act-order, AWQ, FP8 E4M3 with per-channel
  and 128x128 block scales in BF16 and F32, E2M1 FP4 with E8M0 scales): random components and the
  [N, K] f32 matrix computed here in numpy straight from the published layouts (AutoGPTQ,
  AutoAWQ, compressed-tensors, DeepSeek-V3 FP8, OCP MX v1.0), in tests/fixtures/hf_packed/.
- Scalar conversions: numpy's f16 and torch's bf16 over all 65536 words (SHA-256 of the f32
  values with NaNs canonical, and of the NaN mask), the E4M3 table from its definition (checked against torch's
  float8_e4m3fn), torch's float8_e5m2, E8M0 from its definition (checked against torch's
  float8_e8m0fnu) and the OCP E2M1 table, in tests/fixtures/scalars.bin.
- Real GGUF tensors: byte offsets, lengths and gguf-py's decode (SHA-256 of all values, per-row
  hashes and samples) of chosen tensors of the two real checkpoints, in
  tests/fixtures/real_gguf_tensors.json.

File format ("named arrays", little-endian): b"PFNA", u32 version (1), u32 count, then per array:
u32 name length, name (UTF-8), u32 dtype length, dtype (u8 i32 u32 u64 f16 bf16 f32 f8_e4m3), u32 rank,
u64 dims[rank], u64 byte length, the bytes.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/gen_format_fixtures.py
"""
import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, quants

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates/poot-formats/tests/fixtures"
MODELS = Path(os.environ.get("POOT_CACHE", Path.home() / ".cache/poot")) / "models"

rng = np.random.default_rng(20240611)


def write_arrays(path: Path, arrays: list[tuple[str, str, np.ndarray]]) -> None:
    out = bytearray(b"PFNA")
    out += struct.pack("<II", 1, len(arrays))
    for name, dtype, arr in arrays:
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        out += struct.pack("<I", len(name)) + name.encode()
        out += struct.pack("<I", len(dtype)) + dtype.encode()
        out += struct.pack("<I", arr.ndim) + b"".join(struct.pack("<Q", d) for d in arr.shape)
        out += struct.pack("<Q", len(raw)) + raw
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))


def sha256_rows(values: np.ndarray) -> np.ndarray:
    """SHA-256 of each row's little-endian f32 bytes, as u8 [rows, 32]."""
    values = np.ascontiguousarray(values.astype("<f4", copy=False))
    return np.array([np.frombuffer(hashlib.sha256(r.tobytes()).digest(), dtype=np.uint8) for r in values])


# ---------------------------------------------------------------------------------------------
# GGUF block formats
# ---------------------------------------------------------------------------------------------

# (type, block bytes, byte offsets of f16 scale fields) from ggml-common.h's block structs.
GGUF_FORMATS = [
    (QT.Q4_0, 18, [0]),
    (QT.Q4_1, 20, [0, 2]),
    (QT.Q5_0, 22, [0]),
    (QT.Q5_1, 24, [0, 2]),
    (QT.Q8_0, 34, [0]),
    (QT.Q2_K, 84, [80, 82]),
    (QT.Q3_K, 110, [108]),
    (QT.Q4_K, 144, [0, 2]),
    (QT.Q5_K, 176, [0, 2]),
    (QT.Q6_K, 210, [208]),
    (QT.IQ2_XS, 74, [0]),
    (QT.IQ3_XXS, 98, [0]),
    (QT.IQ3_S, 110, [0]),
    (QT.IQ4_NL, 18, [0]),
    (QT.IQ4_XS, 136, [0]),
    (QT.MXFP4, 17, []),
]

SPECIAL_F16 = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 6.0e-8, -3.0e-5, 65504.0], dtype=np.float16)


def realistic_f16(n: int) -> np.ndarray:
    """Finite f16 scales, log-uniform in [2^-14, 2^-1] with random sign."""
    mag = np.exp2(rng.uniform(-14.0, -1.0, size=n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(np.float16)


def gguf_blocks(qtype, block_bytes: int, f16_offsets: list[int]) -> None:
    block_elems = quants.GGML_QUANT_SIZES[qtype][0]
    assert quants.GGML_QUANT_SIZES[qtype][1] == block_bytes, qtype.name
    n_tame = 256 if block_elems == 32 else 160
    n_wild = 32 if block_elems == 32 else 16
    n_blocks = n_wild + n_tame
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    # Wild blocks: unconstrained bytes; force special scale values into some of them.
    for i in range(n_wild):
        for off in f16_offsets:
            if rng.random() < 0.5:
                v = SPECIAL_F16[rng.integers(len(SPECIAL_F16))]
                blocks[i, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        if qtype == QT.MXFP4 and i < 8:
            blocks[i, 0] = [0, 1, 2, 127, 253, 254, 255, 128][i]
    # Tame blocks: realistic finite scales.
    for off in f16_offsets:
        vals = realistic_f16(n_tame)
        blocks[n_wild:, off:off + 2] = vals.view(np.uint8).reshape(n_tame, 2)
    if qtype == QT.MXFP4:
        blocks[n_wild:, 0] = rng.integers(110, 135, size=n_tame, dtype=np.uint8)
    with np.errstate(all="ignore"):
        decoded = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(n_blocks, block_elems)
    tame = decoded[n_wild:]
    assert np.isfinite(tame).all(), qtype.name
    n_full = n_wild + (n_tame if block_elems == 32 else 16)
    meta = np.array([qtype.value, n_wild, n_full], dtype=np.uint32)
    write_arrays(FIXTURES / "gguf_blocks" / f"{qtype.name}.bin", [
        ("meta", "u32", meta),
        ("blocks", "u8", blocks),
        ("decoded", "f32", decoded[:n_full]),
        ("decoded_sha256", "u8", sha256_rows(decoded)),
    ])


# ---------------------------------------------------------------------------------------------
# Hugging Face packed layouts: independent numpy references from the published layouts.
# ---------------------------------------------------------------------------------------------

def f16_scales(shape) -> np.ndarray:
    return (rng.uniform(0.002, 0.05, size=shape) * np.where(rng.random(shape) < 0.1, -1, 1)).astype(np.float16)


def pack_nibbles_along(values: np.ndarray, axis: int, order=range(8)) -> np.ndarray:
    """Packs groups of 8 int4 values along `axis` into int32: value `order[i]` of each group goes
    to bits 4i..4i+4."""
    v = np.moveaxis(values.astype(np.uint32), axis, -1)
    v = v.reshape(*v.shape[:-1], -1, 8)
    word = np.zeros(v.shape[:-1], dtype=np.uint32)
    for i, j in enumerate(order):
        word |= v[..., j] << np.uint32(4 * i)
    return np.moveaxis(word, -1, axis).view(np.int32)


def gptq_case(name: str, n: int, k: int, group: int, act_order: bool, v1: bool) -> None:
    # The quantizer's integer weights and zero points, in logical [K, N] (AutoGPTQ's intweight
    # orientation) and [G, N].
    groups = (k + group - 1) // group if group > 0 else 1
    q = rng.integers(0, 16, size=(k, n), dtype=np.int64)
    zeros = rng.integers(0 if not v1 else 1, 16 if not v1 else 17, size=(groups, n), dtype=np.int64)
    scales = f16_scales((groups, n))
    if act_order:
        # desc_act: columns are visited in a permuted order; consecutive visited columns share a
        # group. g_idx[k] = (position of column k in the order) // group.
        perm = rng.permutation(k)
        inv = np.empty(k, dtype=np.int64)
        inv[perm] = np.arange(k)
        g_idx = (inv // group).astype(np.int32)
    else:
        g_idx = (np.arange(k) // group if group > 0 else np.zeros(k, dtype=np.int64)).astype(np.int32)
    stored_zeros = zeros - 1 if v1 else zeros
    assert stored_zeros.min() >= 0 and stored_zeros.max() <= 15
    qweight = pack_nibbles_along(q, axis=0)  # [K/8, N]
    qzeros = pack_nibbles_along(stored_zeros, axis=1)  # [G, N/8]
    # W^T[k, n] = scale[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n]), exact in float64.
    wt = scales[g_idx].astype(np.float64) * (q - zeros[g_idx]).astype(np.float64)
    expected = wt.T.astype(np.float32)  # [N, K]
    assert np.array_equal(expected.astype(np.float64), wt.T), "f16 * int4 must be exact in f32"
    arrays = [
        ("meta", "u32", np.array([n, k, max(group, 0), int(act_order), int(v1)], dtype=np.uint32)),
        ("qweight", "i32", qweight),
        ("qzeros", "i32", qzeros),
        ("scales", "f16", scales),
        ("expected", "f32", expected),
    ]
    if act_order or name.endswith("_gidx"):
        arrays.insert(4, ("g_idx", "i32", g_idx))
    write_arrays(FIXTURES / "hf_packed" / f"{name}.bin", arrays)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_case(name: str, n: int, k: int, group: int) -> None:
    groups = k // group
    q = rng.integers(0, 16, size=(k, n), dtype=np.int64)  # [K, N]
    zeros = rng.integers(0, 16, size=(groups, n), dtype=np.int64)
    scales = f16_scales((groups, n))
    # AutoAWQ's WQLinear_GEMM.from_linear: for each 8 output columns, nibble i holds column
    # order_map[i].
    qweight = pack_nibbles_along(q, axis=1, order=AWQ_ORDER)  # [K, N/8]
    qzeros = pack_nibbles_along(zeros, axis=1, order=AWQ_ORDER)  # [G, N/8]
    g = np.arange(k) // group
    wt = scales[g].astype(np.float64) * (q - zeros[g]).astype(np.float64)
    expected = wt.T.astype(np.float32)
    assert np.array_equal(expected.astype(np.float64), wt.T)
    write_arrays(FIXTURES / "hf_packed" / f"{name}.bin", [
        ("meta", "u32", np.array([n, k, group], dtype=np.uint32)),
        ("qweight", "i32", qweight),
        ("qzeros", "i32", qzeros),
        ("scales", "f16", scales),
        ("expected", "f32", expected),
    ])


def e4m3_table() -> np.ndarray:
    """OCP E4M3 (fn) byte -> value, from the format definition, cross-checked with torch."""
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = b & 7
    val = np.where(exp == 0, man * 2.0 ** -9, (1 + man / 8.0) * 2.0 ** (exp - 7.0)) * sign
    val = np.where((exp == 15) & (man == 7), np.nan, val).astype(np.float32)
    t = torch.from_numpy(b.astype(np.uint8)).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(np.isnan(t), np.isnan(val)) and np.array_equal(t[~np.isnan(t)], val[~np.isnan(val)])
    return val


def bf16_to_f32(words: np.ndarray) -> np.ndarray:
    return (words.astype(np.uint32) << np.uint32(16)).view(np.float32)


def fp8_case(name: str, n: int, k: int, block: bool, scale_dtype: str) -> None:
    table = e4m3_table()
    weight = rng.integers(0, 256, size=(n, k), dtype=np.uint8)  # includes the NaN codes
    if block:
        sshape = ((n + 127) // 128, (k + 127) // 128)
    else:
        sshape = (n, 1)
    scale_f32 = np.exp2(rng.uniform(-12, 2, size=sshape)).astype(np.float32)
    if scale_dtype == "bf16":
        stored = (scale_f32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)  # truncate to bf16
        scale_f32 = bf16_to_f32(stored)
        stored_scale = stored
    else:
        stored_scale = scale_f32
    if block:
        s_full = np.repeat(np.repeat(scale_f32, 128, axis=0), 128, axis=1)[:n, :k]
    else:
        s_full = np.broadcast_to(scale_f32, (n, k))
    # One f32 multiply (numpy float32 ufunc, IEEE round-to-nearest-even).
    with np.errstate(all="ignore"):
        expected = table[weight] * s_full.astype(np.float32)
    write_arrays(FIXTURES / "hf_packed" / f"{name}.bin", [
        ("meta", "u32", np.array([n, k, int(block), int(scale_dtype == "bf16")], dtype=np.uint32)),
        ("weight", "f8_e4m3", weight),
        ("weight_scale_inv" if block else "weight_scale", scale_dtype, stored_scale),
        ("expected", "f32", expected.astype(np.float32)),
    ])


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                dtype=np.float32)


def e8m0_table() -> np.ndarray:
    e = np.arange(256)
    val = np.where(e == 255, np.nan, np.ldexp(1.0, e - 127)).astype(np.float32)
    t = torch.from_numpy(e.astype(np.uint8)).view(torch.float8_e8m0fnu).float().numpy()
    assert np.array_equal(np.isnan(t), np.isnan(val)) and np.array_equal(t[~np.isnan(t)], val[~np.isnan(val)])
    return val


def fp4_case(name: str, n: int, k: int) -> None:
    codes = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # low nibble first
    scales = rng.integers(100, 140, size=(n, k // 32), dtype=np.uint8)
    scales[0, :4] = [0, 1, 254, 255]  # extremes: 2^-127, 2^-126, 2^127, NaN
    e8m0 = e8m0_table()
    # One f32 multiply, exact whenever the product is in f32's range (both factors are short
    # powers-of-two multiples); 6 * 2^127 overflows to inf as in any f32 product.
    s_full = np.repeat(e8m0[scales], 32, axis=1)
    with np.errstate(all="ignore"):
        expected32 = E2M1[codes] * s_full
        expected = E2M1[codes].astype(np.float64) * s_full.astype(np.float64)
    in_range = np.isfinite(expected) & (np.abs(expected) <= np.finfo(np.float32).max)
    assert np.array_equal(expected32[in_range].astype(np.float64), expected[in_range]), "exact in f32"
    write_arrays(FIXTURES / "hf_packed" / f"{name}.bin", [
        ("meta", "u32", np.array([n, k], dtype=np.uint32)),
        ("weight_packed", "u8", packed),
        ("weight_scale", "u8", scales),
        ("expected", "f32", expected32),
    ])


# ---------------------------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------------------------

def canonical_sha256(values: np.ndarray) -> np.ndarray:
    """SHA-256 of little-endian f32 values with every NaN written as 0x7fc00000 (NaN payloads are
    not part of any format's meaning; NaN positions are hashed separately)."""
    bits = values.astype("<f4").view("<u4").copy()
    bits[np.isnan(values)] = 0x7FC00000
    return np.frombuffer(hashlib.sha256(bits.tobytes()).digest(), np.uint8)


def scalars() -> None:
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f16 = all16.view(np.float16).astype(np.float32)
    bf16 = torch.from_numpy(all16.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    b = np.arange(256, dtype=np.uint8)
    e5m2 = torch.from_numpy(b.copy()).view(torch.float8_e5m2).float().numpy()
    write_arrays(FIXTURES / "scalars.bin", [
        ("f16_sha256", "u8", canonical_sha256(f16)),
        ("f16_nan_sha256", "u8", np.frombuffer(hashlib.sha256(np.isnan(f16).astype(np.uint8).tobytes()).digest(), np.uint8)),
        ("bf16_sha256", "u8", canonical_sha256(bf16)),
        ("bf16_nan_sha256", "u8", np.frombuffer(hashlib.sha256(np.isnan(bf16).astype(np.uint8).tobytes()).digest(), np.uint8)),
        ("e4m3", "f32", e4m3_table()),
        ("e5m2", "f32", e5m2),
        ("e8m0", "f32", e8m0_table()),
        ("e2m1", "f32", E2M1),
    ])


# ---------------------------------------------------------------------------------------------
# Real GGUF tensors
# ---------------------------------------------------------------------------------------------

REAL = {
    "smollm2-135m-instruct-q4_1.gguf": ["blk.0.attn_k.weight", "blk.0.ffn_down.weight", "token_embd.weight"],
    "gemma3-270m-q4_k_m.gguf": [
        "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_down.weight",
        "blk.0.ffn_gate.weight",
    ],
}


def real_tensors() -> None:
    records = []
    for file, names in REAL.items():
        path = MODELS / file
        reader = GGUFReader(path)
        by_name = {t.name: t for t in reader.tensors}
        for name in names:
            t = by_name[name]
            k, n = (int(d) for d in t.shape)  # ggml order: ne[0] = K (row length), ne[1] = N
            raw = np.asarray(t.data).reshape(-1).view(np.uint8)
            with open(path, "rb") as f:
                f.seek(int(t.data_offset))
                assert f.read(raw.nbytes) == raw.tobytes(), "data_offset is absolute"
            decoded = quants.dequantize(raw, t.tensor_type).astype(np.float32).reshape(n, k)
            rows = [0, n // 2, n - 1]
            flat = decoded.reshape(-1)
            sample_idx = np.linspace(0, flat.size - 1, 97).astype(np.int64)
            records.append({
                "file": file,
                "tensor": name,
                "ggml_type": t.tensor_type.name,
                "ggml_type_id": int(t.tensor_type.value),
                "offset_bytes": int(t.data_offset),
                "n_bytes": int(raw.nbytes),
                "n_rows": n,
                "k_cols": k,
                "raw_sha256": hashlib.sha256(raw.tobytes()).hexdigest(),
                "decoded_sha256": hashlib.sha256(decoded.astype("<f4").tobytes()).hexdigest(),
                "rows": [{"row": r, "sha256": hashlib.sha256(decoded[r].astype("<f4").tobytes()).hexdigest()}
                         for r in rows],
                "samples": [[int(i), int(flat[i:i + 1].view(np.uint32)[0])] for i in sample_idx],
            })
            print(f"  {file} {name} {t.tensor_type.name} [{n}, {k}]")
    (FIXTURES / "real_gguf_tensors.json").write_text(json.dumps(records, indent=1) + "\n")


def main() -> None:
    for qtype, block_bytes, offsets in GGUF_FORMATS:
        gguf_blocks(qtype, block_bytes, offsets)
    gptq_case("gptq_g32", 32, 256, 32, act_order=False, v1=True)
    gptq_case("gptq_g32_gidx", 32, 256, 32, act_order=False, v1=True)
    gptq_case("gptq_g64_actorder", 32, 256, 64, act_order=True, v1=True)
    gptq_case("gptq_g32_v2", 16, 128, 32, act_order=False, v1=False)
    gptq_case("gptq_channel", 16, 128, -1, act_order=False, v1=True)
    awq_case("awq_g64", 32, 256, 64)
    fp8_case("fp8_channel_bf16", 24, 200, block=False, scale_dtype="bf16")
    fp8_case("fp8_channel_f32", 24, 200, block=False, scale_dtype="f32")
    fp8_case("fp8_block_bf16", 136, 144, block=True, scale_dtype="bf16")
    fp8_case("fp8_block_f32", 136, 144, block=True, scale_dtype="f32")
    fp4_case("fp4_e2m1", 32, 256)
    scalars()
    if all((MODELS / f).exists() for f in REAL):
        real_tensors()
    else:
        print(f"SKIP real tensors: checkpoints not in {MODELS} (scripts/fetch-models.sh)")
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    print(f"fixtures: {total} bytes under {FIXTURES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
