#!/usr/bin/env python3
"""Writes poot-load's synthetic fixtures with the reference writers (gguf-py, and the
safetensors package over torch), plus the expected index of each: what was written, as the
writers were given it, and what gguf-py / safetensors read back.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/make_load_fixtures.py
Writes crates/poot-load/tests/fixtures/synthetic/. Deterministic (fixed seed).
"""
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_describe import bytes_digest, describe_reader_field, describe_value, dumps_lines  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/poot-load/tests/fixtures/synthetic"
RNG = np.random.default_rng(20261129)

# ggml types poot refuses at load (no packed format).
REFUSED = ["Q8_1", "Q8_K", "IQ2_XXS", "IQ2_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "NVFP4", "Q1_0"]

# (key, type name, value as given to the writer). Arrays: ("array", (elem, values)), nested
# arrays as ("array", ("array", [(elem, values), ...])).
METADATA = [
    ("general.architecture", "string", "poot-test"),
    ("test.u8", "u8", 200),
    ("test.i8", "i8", -100),
    ("test.u16", "u16", 60000),
    ("test.i16", "i16", -30000),
    ("test.u32", "u32", 4000000000),
    ("test.i32", "i32", -2000000000),
    ("test.u64", "u64", 2**63 + 12345),
    ("test.i64", "i64", -(2**62) - 7),
    ("test.f32", "f32", 0.1),
    ("test.f64", "f64", -1234.5678e-30),
    ("test.bool_true", "bool", True),
    ("test.bool_false", "bool", False),
    ("test.string", "string", "héllo, 世界 \n\t\"quoted\""),
    ("test.empty_string", "string", ""),
    ("test.arr_u8", "array", ("u8", [0, 1, 255])),
    ("test.arr_i8", "array", ("i8", [-128, 0, 127])),
    ("test.arr_u16", "array", ("u16", [0, 65535])),
    ("test.arr_i16", "array", ("i16", [-32768, 32767])),
    ("test.arr_u32", "array", ("u32", [1, 2, 4294967295])),
    ("test.arr_i32", "array", ("i32", [-1, 0, 2147483647])),
    ("test.arr_u64", "array", ("u64", [0, 2**64 - 1])),
    ("test.arr_i64", "array", ("i64", [-(2**63), 2**63 - 1])),
    ("test.arr_f32", "array", ("f32", [1.5, -0.25, 3.0e38])),
    ("test.arr_f64", "array", ("f64", [1e-300, -2.5])),
    ("test.arr_bool", "array", ("bool", [True, False, True])),
    ("test.arr_string", "array", ("string", ["a", "", "ünï", "<|im_start|>"])),
    ("test.nested_i32", "array", ("array", [("i32", [1, 2, 3]), ("i32", [4, 5])])),
    ("test.nested_string", "array", ("array", [("string", ["x", "y"]), ("string", ["z"])])),
    ("test.nested_deep", "array", ("array", [("array", [("i32", [1]), ("i32", [2, 3])]), ("array", [("i32", [4])])])),
]

VTYPE = {
    "u8": GGUFValueType.UINT8, "i8": GGUFValueType.INT8, "u16": GGUFValueType.UINT16,
    "i16": GGUFValueType.INT16, "u32": GGUFValueType.UINT32, "i32": GGUFValueType.INT32,
    "u64": GGUFValueType.UINT64, "i64": GGUFValueType.INT64, "f32": GGUFValueType.FLOAT32,
    "f64": GGUFValueType.FLOAT64, "bool": GGUFValueType.BOOL, "string": GGUFValueType.STRING,
}


def add_metadata(w: GGUFWriter, entries) -> None:
    for key, type_name, value in entries:
        if key == "general.architecture":
            continue  # GGUFWriter writes it from its `arch` argument
        if type_name != "array":
            w.add_key_value(key, value, VTYPE[type_name])
            continue
        elem, values = value
        if elem == "array":
            # gguf-py infers inner element types (ints as i32, strings as string).
            w.add_key_value(key, nested_python(values), GGUFValueType.ARRAY, sub_type=GGUFValueType.ARRAY)
        else:
            w.add_key_value(key, values, GGUFValueType.ARRAY, sub_type=VTYPE[elem])


def nested_python(items):
    return [nested_python(vs) if e == "array" else list(vs) for e, vs in items]


def tensor_bytes_shape(qtype: GGMLQuantizationType, shape_elems: tuple) -> tuple:
    block, type_size = GGML_QUANT_SIZES[qtype]
    assert shape_elems[-1] % block == 0
    return (*shape_elems[:-1], shape_elems[-1] // block * type_size)


def write_gguf(path: Path, tensors, metadata=METADATA, alignment=None) -> dict:
    """tensors: list of (name, type name, shape outermost-first in elements)."""
    w = GGUFWriter(path, arch="poot-test")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    add_metadata(w, metadata)
    expected = []
    for name, type_name, shape in tensors:
        qtype = GGMLQuantizationType[type_name]
        byte_shape = tensor_bytes_shape(qtype, shape)
        data = RNG.integers(0, 256, size=byte_shape, dtype=np.uint8)
        w.add_tensor(name, data, raw_dtype=qtype)
        expected.append({"name": name, "shape": list(shape), "type": type_name,
                         "n_bytes": int(data.nbytes), "sha256": bytes_digest(data.tobytes())})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What gguf-py reads back must be what was written.
    r = GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    for e in expected:
        t = by_name[e["name"]]
        assert list(reversed(t.shape.tolist())) == e["shape"], e["name"]
        assert t.tensor_type.name == e["type"]
        assert bytes_digest(np.asarray(t.data).tobytes()) == e["sha256"]
        e["file_offset"] = int(t.data_offset)
    meta = [{"key": "general.architecture", **describe_value("string", "poot-test")}]
    if alignment is not None:
        meta.append({"key": "general.alignment", **describe_value("u32", alignment)})
    for key, type_name, value in metadata:
        if key == "general.architecture":
            continue
        d = describe_value(type_name, value)
        f = r.fields[key]
        if not (type_name == "array" and value[0] == "array"):
            assert describe_reader_field(f) == d, (key, describe_reader_field(f), d)
        meta.append({"key": key, **d})
    return {"file": path.name, "version": 3, "alignment": int(r.alignment),
            "data_offset": int(r.data_offset), "file_len": path.stat().st_size,
            "metadata": meta, "tensors": expected}


def all_type_tensors(types):
    out = []
    for i, t in enumerate(types):
        block, _ = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
        if block == 1:
            # Dense: vary the rank (1 to 4) to check dimension order.
            shape = [(6,), (3, 5), (2, 3, 4), (2, 1, 3, 2)][i % 4]
        else:
            shape = (3, 2 * block) if i % 2 == 0 else (2, 1, block)
        out.append((f"t{i:02}.{t.lower()}", t, shape))
    return out


def gguf_fixtures(out: Path) -> None:
    all_types = [t.name for t in GGMLQuantizationType]
    admitted = [t for t in all_types if t not in REFUSED]

    exp = write_gguf(out / "all_types.gguf", all_type_tensors(all_types))
    (out / "all_types.json").write_text(dumps_lines(exp))

    # Version 2 has the same little-endian layout as version 3: same file, version field 2.
    data = bytearray((out / "all_types.gguf").read_bytes())
    assert struct.unpack_from("<I", data, 4)[0] == 3
    struct.pack_into("<I", data, 4, 2)
    (out / "all_types_v2.gguf").write_bytes(bytes(data))
    GGUFReader(out / "all_types_v2.gguf")  # gguf-py reads v2 too

    fused = [("blk.0.attn_qkv.weight", "Q8_0", (12, 64)),
             ("blk.0.attn_qkv_k.weight", "Q4_K", (6, 256)),
             ("blk.0.attn_qkv.bias", "F32", (12,))]
    small_meta = [m for m in METADATA if m[0] in ("test.u32", "test.arr_string")]
    exp = write_gguf(out / "admitted.gguf", all_type_tensors(admitted) + fused, metadata=small_meta)
    # Row slices of the fused tensors, as numpy slices gguf-py's row-shaped data.
    r = GGUFReader(out / "admitted.gguf")
    rows = []
    for t in r.tensors:
        if t.name.startswith("blk.0.attn_qkv"):
            arr = np.asarray(t.data)
            n = arr.shape[0] // 3
            for part, (a, b) in zip("qkv", [(0, n), (n, 2 * n), (2 * n, 3 * n)]):
                rows.append({"name": t.name, "part": part, "start": a, "end": b,
                             "sha256": bytes_digest(arr[a:b].tobytes())})
    exp["row_slices"] = rows
    (out / "admitted.json").write_text(dumps_lines(exp))

    exp = write_gguf(out / "aligned256.gguf",
                     [("a", "F32", (3,)), ("b", "Q4_0", (2, 32)), ("c", "F16", (5,))],
                     metadata=small_meta, alignment=256)
    (out / "aligned256.json").write_text(dumps_lines(exp))

    for t in REFUSED:
        block, _ = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
        write_gguf(out / f"refused_{t.lower()}.gguf",
                   [("ok.weight", "F32", (2,)), (f"blk.0.{t.lower()}.weight", t, (2, block))],
                   metadata=[])


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def st_expected(path: Path) -> list:
    out = []
    with safe_open(path, framework="pt") as f:
        for name in sorted(f.keys()):
            sl = f.get_slice(name)
            out.append({"name": name, "shape": list(sl.get_shape()), "type": sl.get_dtype(),
                        "sha256": bytes_digest(tensor_bytes(f.get_tensor(name)))})
    return out


def rand(shape, dtype):
    g = torch.Generator().manual_seed(int(RNG.integers(0, 2**31)))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def safetensors_fixtures(out: Path) -> None:
    dtypes = {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
        "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
        "F8_E5M2": torch.float8_e5m2, "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16,
    }
    shapes = [(2, 3), (3,), (2, 2, 2), (4, 1), (2,), (), (3, 1), (5,), (0, 3), (2, 2), (2, 4), (3,),
              (2,), (2,), (1, 2, 1, 2)]
    tensors = {f"{name.lower()}.tensor": rand(shape, dt) for (name, dt), shape in zip(dtypes.items(), shapes)}
    path = out / "all_dtypes.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "poot-load fixture"})
    (out / "all_dtypes.json").write_text(dumps_lines({
        "file": path.name, "metadata": {"format": "pt", "note": "poot-load fixture"},
        "tensors": st_expected(path)}))

    save_file({"z.c64": torch.zeros(2, dtype=torch.complex64)}, out / "unknown_dtype_c64.safetensors")

    # A sharded checkpoint directory with side files.
    d = out / "sharded"
    d.mkdir()
    shards = {
        "model-00001-of-00002.safetensors": {"model.embed.weight": rand((8, 4), torch.bfloat16),
                                             "model.layers.0.w.weight": rand((4, 4), torch.float16)},
        "model-00002-of-00002.safetensors": {"model.layers.1.w.weight": rand((4, 4), torch.float16),
                                             "lm_head.weight": rand((8, 4), torch.float32)},
    }
    weight_map = {}
    for file, ts in shards.items():
        save_file(ts, d / file, metadata={"format": "pt"})
        weight_map.update({n: file for n in ts})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4}, indent=2))
    (d / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    expected = []
    for file in shards:
        for e in st_expected(d / file):
            expected.append({**e, "file": file})
    (out / "sharded.json").write_text(dumps_lines({"tensors": sorted(expected, key=lambda e: e["name"])}))

    quant_fixtures(out)


def write_hf(d: Path, config: dict, tensors: dict) -> None:
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})


def quant_fixtures(out: Path) -> None:
    """Quantized Hugging Face layouts at in=64, out=32, group 16 (random payloads)."""
    i32 = torch.int32
    write_hf(out / "gptq", {"model_type": "llama", "quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": True, "sym": True}}, {
        "layer.q_proj.qweight": rand((64 // 8, 32), i32), "layer.q_proj.qzeros": rand((4, 32 // 8), i32),
        "layer.q_proj.scales": rand((4, 32), torch.float16), "layer.q_proj.g_idx": rand((64,), i32),
        "lm_head.weight": rand((16, 64), torch.bfloat16)})
    write_hf(out / "awq", {"model_type": "llama", "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 16, "zero_point": True, "version": "gemm"}}, {
        "layer.q_proj.qweight": rand((64, 32 // 8), i32), "layer.q_proj.qzeros": rand((4, 32 // 8), i32),
        "layer.q_proj.scales": rand((4, 32), torch.float16)})
    write_hf(out / "fp8_block", {"model_type": "deepseek_v3", "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}}, {
        "layer.q_proj.weight": rand((32, 64), torch.float8_e4m3fn),
        "layer.q_proj.weight_scale_inv": rand((2, 4), torch.float32)})
    write_hf(out / "fp8_channel", {"model_type": "llama", "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}}},
        "ignore": ["lm_head"]}}, {
        "layer.q_proj.weight": rand((32, 64), torch.float8_e4m3fn),
        "layer.q_proj.weight_scale": rand((32, 1), torch.bfloat16),
        "lm_head.weight": rand((16, 64), torch.bfloat16)})
    write_hf(out / "fp8_noscale", {"model_type": "llama"}, {
        "layer.q_proj.weight": rand((32, 64), torch.float8_e4m3fn)})


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    gguf_fixtures(OUT)
    safetensors_fixtures(OUT)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT.relative_to(ROOT)}: {sum(1 for p in OUT.rglob('*') if p.is_file())} files, {total} B")


if __name__ == "__main__":
    main()
