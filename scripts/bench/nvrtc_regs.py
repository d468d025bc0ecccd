#!/usr/bin/env python3
"""Registers and spills of rendered poot CUDA kernels, without a GPU.

Compiles each `.cu` file (as `dump_kernels` writes them) with NVRTC for a real architecture
(a cubin, so ptxas runs) with poot's own options, and prints ptxas's report: registers per
thread, spill stores and loads, shared memory. NVRTC comes from the PyPI wheel
`nvidia-cuda-nvrtc-cu12` (no GPU or driver needed):

    python3 -m pip install nvidia-cuda-nvrtc-cu12
    target/release/examples/dump_kernels MODEL.gguf /tmp/k --tokens 512
    python3 scripts/bench/nvrtc_regs.py /tmp/k/k_grouped_gemv_*.cu

`POOT_TUNING` changes what `dump_kernels` renders (a residency or group size), so two dumps
compare a tuning's registers and spills before a device call measures its speed.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
from pathlib import Path

# The options poot's PTX device passes (crates/poot-ptx-device/src/nvrtc.rs), for a cubin.
OPTIONS = [
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--std=c++17",
    "-default-device",
    "--ptxas-options=-v",
]


def find_nvrtc() -> str:
    """libnvrtc from $NVRTC_LIB, else the nvidia-cuda-nvrtc-cu12 wheel."""
    if os.environ.get("NVRTC_LIB"):
        return os.environ["NVRTC_LIB"]
    for base in sys.path:
        hits = sorted(glob.glob(os.path.join(base, "nvidia/cuda_nvrtc/lib/libnvrtc.so.*")))
        if hits:
            return hits[0]
    sys.exit("error: no libnvrtc (pip install nvidia-cuda-nvrtc-cu12, or set NVRTC_LIB)")


def report(lib: ctypes.CDLL, path: Path, arch: int) -> list[str]:
    prog = ctypes.c_void_p()
    src = path.read_bytes()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, path.name.encode(), 0, None, None):
        return ["error: nvrtcCreateProgram failed"]
    opts = [f"--gpu-architecture=sm_{arch}".encode()] + [o.encode() for o in OPTIONS]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    lines = log.value.decode(errors="replace").splitlines()
    keep = [line.strip() for line in lines if "spill" in line or "registers" in line]
    if rc:
        keep += [line.strip() for line in lines if "error" in line][:5]
        keep.append(f"error: nvrtcCompileProgram returned {rc}")
    return keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+", type=Path, help="rendered .cu files")
    ap.add_argument("--arch", type=int, default=90, help="sm_XY to compile for (default 90)")
    args = ap.parse_args()
    lib = ctypes.CDLL(find_nvrtc())
    for path in args.kernels:
        print(path.name)
        for line in report(lib, path, args.arch):
            print("   ", line)


if __name__ == "__main__":
    main()
