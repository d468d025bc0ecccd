"""Shared by the poot-load reference scripts: a compact, exact JSON description of GGUF
metadata values and of tensor bytes, which the Rust tests recompute from their own parse.

Value descriptions:
  scalar  {"type": "u32", "value": 30}        (floats as Python floats: exact for f32/f64)
  string  {"type": "string", "value": "..."}
  array   {"type": "array", "elem": "i32", "len": N, "head": [first 5], "sha256": hex}
  nested  {"type": "array", "elem": "array", "len": N, "items": [array descriptions]}

An array's sha256 is over its elements encoded as GGUF stores them (little-endian words; a
bool as one byte; a string as its u64 byte length then its UTF-8 bytes).
"""
import hashlib
import struct

from gguf import GGUFValueType

TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8",
    GGUFValueType.UINT16: "u16", GGUFValueType.INT16: "i16",
    GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.FLOAT64: "f64",
    GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array",
}
PACK = {"u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i",
        "u64": "<Q", "i64": "<q", "f32": "<f", "f64": "<d"}
HEAD = 5


def encode_elem(elem: str, v) -> bytes:
    if elem == "string":
        b = v.encode("utf-8")
        return struct.pack("<Q", len(b)) + b
    if elem == "bool":
        return bytes([1 if v else 0])
    return struct.pack(PACK[elem], v)


def norm(elem: str, v):
    """A value as JSON holds it (an f32 widened exactly to a Python float)."""
    if elem == "f32":
        return struct.unpack("<f", struct.pack("<f", v))[0]
    if elem == "bool":
        return bool(v)
    return v


def describe_array(elem: str, values: list) -> dict:
    if elem == "array":
        # values: list of (elem, list) pairs
        return {"type": "array", "elem": "array", "len": len(values),
                "items": [describe_array(e, vs) for e, vs in values]}
    h = hashlib.sha256()
    for v in values:
        h.update(encode_elem(elem, v))
    return {"type": "array", "elem": elem, "len": len(values),
            "head": [norm(elem, v) for v in values[:HEAD]], "sha256": h.hexdigest()}


def describe_value(type_name: str, value) -> dict:
    if type_name == "array":
        elem, values = value
        return describe_array(elem, values)
    return {"type": type_name, "value": norm(type_name, value)}


def describe_reader_field(field) -> dict:
    """A gguf-py ReaderField (flat values only: gguf-py flattens nested arrays)."""
    main = TYPE_NAMES[field.types[0]]
    if main == "array":
        elem = TYPE_NAMES[field.types[1]]
        if elem == "array":
            raise ValueError(f"{field.name}: gguf-py cannot describe nested arrays")
        return describe_array(elem, field.contents())
    return describe_value(main, field.contents())


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ends_digest(data: bytes) -> str:
    """SHA-256 of the first 4 KiB followed by the last 4 KiB (the whole tensor when smaller
    than 8 KiB): cheap to check on a large real checkpoint, and it catches a wrong offset or
    length at either end."""
    if len(data) <= 8192:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha256(data[:4096] + data[-4096:]).hexdigest()


def dumps_lines(doc: dict) -> str:
    """JSON with one line per top-level scalar and one line per element of a top-level list:
    compact, and a regenerated fixture diffs line by line."""
    import json
    lines = ["{"]
    items = list(doc.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines.append(f" {json.dumps(k)}: [")
            for j, x in enumerate(v):
                lines.append("  " + json.dumps(x, ensure_ascii=False, separators=(",", ":"))
                             + ("," if j + 1 < len(v) else ""))
            lines.append(" ]" + comma)
        else:
            lines.append(f" {json.dumps(k)}: " + json.dumps(v, ensure_ascii=False, separators=(",", ":")) + comma)
    lines.append("}")
    return "\n".join(lines) + "\n"
