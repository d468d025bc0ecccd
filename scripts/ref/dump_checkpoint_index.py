#!/usr/bin/env python3
"""Writes poot-load's reference index of the real checkpoints, as gguf-py and the safetensors
package read them: per tensor its name, shape (outermost-first, poot's convention: gguf-py
reports GGUF dims innermost-first, so they are reversed here), type name, byte length and a
digest of its first and last 4 KiB; plus the file's metadata.

Usage: PY=$(scripts/pyenv.sh); "$PY" scripts/ref/dump_checkpoint_index.py
Reads ${POOT_CACHE:-~/.cache/poot}/models (scripts/fetch-models.sh), writes
crates/poot-load/tests/fixtures/real/*.json.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_describe import describe_reader_field, dumps_lines, ends_digest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/poot-load/tests/fixtures/real"
MODELS = Path(os.environ.get("POOT_CACHE", Path.home() / ".cache/poot")) / "models"


def dump_gguf(path: Path) -> dict:
    r = GGUFReader(path)
    tensors = []
    for t in r.tensors:
        data = np.asarray(t.data).tobytes()
        assert len(data) == t.n_bytes, t.name
        tensors.append({
            "name": t.name,
            "shape": [int(d) for d in reversed(t.shape.tolist())],
            "type": t.tensor_type.name,
            "n_bytes": int(t.n_bytes),
            "file_offset": int(t.data_offset),
            "ends_sha256": ends_digest(data),
        })
    metadata = [{"key": k, **describe_reader_field(f)}
                for k, f in r.fields.items() if not k.startswith("GGUF.")]
    return {
        "file": path.name,
        "format": "gguf",
        "version": int(r.fields["GGUF.version"].contents()),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "file_len": path.stat().st_size,
        "metadata": metadata,
        "tensors": tensors,
    }


def dump_safetensors_dir(path: Path) -> dict:
    file = path / "model.safetensors"
    tensors = []
    with safe_open(file, framework="pt") as f:
        meta = f.metadata()
        for name in sorted(f.keys()):
            sl = f.get_slice(name)
            t = f.get_tensor(name)
            data = t.contiguous().reshape(-1).view(dtype=torch.uint8).numpy().tobytes()
            tensors.append({
                "name": name,
                "shape": list(sl.get_shape()),
                "type": sl.get_dtype(),
                "n_bytes": len(data),
                "ends_sha256": ends_digest(data),
            })
    config = json.loads((path / "config.json").read_text())
    return {
        "file": "model.safetensors",
        "format": "safetensors",
        "safetensors_metadata": meta,
        "config": {k: config[k] for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")},
        "tensors": tensors,
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    jobs = [
        ("smollm2-135m-instruct-q4_1", MODELS / "smollm2-135m-instruct-q4_1.gguf", dump_gguf),
        ("gemma3-270m-q4_k_m", MODELS / "gemma3-270m-q4_k_m.gguf", dump_gguf),
        ("all-minilm-l6-v2", MODELS / "all-minilm-l6-v2", dump_safetensors_dir),
    ]
    for name, path, dump in jobs:
        if not path.exists():
            print(f"skip {name}: {path} is absent (run scripts/fetch-models.sh)", file=sys.stderr)
            continue
        out = OUT / f"{name}.json"
        out.write_text(dumps_lines(dump(path)))
        print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size} B)")


if __name__ == "__main__":
    main()
