#!/usr/bin/env python3
"""The benchmark table from bench/h200.sh's results folder, as markdown.

For each model NAME the folder holds NAME.poot.json (`poot bench --json`) and NAME.llama.json
(`llama-bench -o json` with `-p P -n N -d 0,P`). llama.cpp's decode figure is its tg N at depth
P: the same context as poot's decode, which follows a P-token prefill. Bandwidth fractions are
each engine's bytes per decode token (the weights the step reads, plus the KV cache at the
mean context in the engine's own cache type: f16 for llama.cpp) over the time per token,
against the copy bandwidth poot measured on the same device.

Usage: table.py RESULTS_DIR [NAME...]
"""

import json
import sys
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def llama_rate(tests, n_prompt: int, n_gen: int, n_depth: int):
    for t in tests or []:
        if (t.get("n_prompt"), t.get("n_gen"), t.get("n_depth", 0)) == (n_prompt, n_gen, n_depth):
            return float(t["avg_ts"])
    return None


def fmt(v, suffix: str = "") -> str:
    """A rate or percentage with the digits that matter: whole above 100, one decimal above 1,
    three significant digits below."""
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:.0f}{suffix}"
    if abs(v) >= 1:
        return f"{v:.1f}{suffix}"
    return f"{v:.3g}{suffix}"


def row(results: Path, name: str):
    poot = load(results / f"{name}.poot.json")
    llama = load(results / f"{name}.llama.json")
    if poot is None:
        reason = (results / f"{name}.poot.log")
        why = reason.read_text().strip().splitlines()[-1:] if reason.exists() else ["no result"]
        return f"| {name} | poot failed: {' '.join(why)[:120]} |" + " |" * 9, None
    p, n = poot["prompt_tokens"], poot["gen_tokens"]
    bw = poot["bandwidth_bytes_per_s"]
    context = poot["mean_context"]
    llama_decode = llama_rate(llama, 0, n, p)
    llama_decode_d0 = llama_rate(llama, 0, n, 0)
    llama_prefill = llama_rate(llama, p, 0, 0)
    llama_bytes = poot["weight_bytes_per_token"] + 2 * poot["kv_elems_per_position"] * context
    llama_fraction = llama_bytes * llama_decode / bw if llama_decode and bw else None
    ratio = poot["decode_tok_s"] / llama_decode if llama_decode else None
    line = (
        f"| {name} | {poot['bytes_per_token'] / 1e6:.1f} MB | {fmt(bw / poot['bytes_per_token'])} | "
        f"{fmt(poot['decode_tok_s'])} | "
        f"{fmt(llama_decode)} | {fmt(ratio)} | {fmt(100 * poot['bandwidth_fraction'], '%')} | "
        f"{fmt(None if llama_fraction is None else 100 * llama_fraction, '%')} | "
        f"{poot['dispatches_per_token']} | {fmt(poot['prefill_tok_s'])} | {fmt(llama_prefill)} |"
    )
    return line, (poot, llama_decode_d0)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    results = Path(sys.argv[1])
    names = sys.argv[2:] or sorted(
        {p.name.split(".")[0] for p in results.glob("*.poot.*")}
    )
    print(
        "| model | bytes/token | roofline tok/s | poot decode tok/s | llama.cpp decode tok/s | poot/llama.cpp | "
        "poot of bandwidth | llama.cpp of bandwidth | dispatches/token | poot prefill tok/s | "
        "llama.cpp prefill tok/s |"
    )
    print("|" + " --- |" * 11)
    notes = []
    for name in names:
        line, extra = row(results, name)
        print(line)
        if extra:
            poot, d0 = extra
            notes.append(
                f"- {name}: {poot['device']} ({poot['backend']}), copy bandwidth "
                f"{poot['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s; prompt {poot['prompt_tokens']}, "
                f"{poot['gen_tokens']} new tokens, {poot['repeats']} repeats; poot prefill chunk "
                f"{poot['prefill_chunk']}; llama.cpp decode at depth 0: {fmt(d0)} tok/s"
                + (f"; POOT_TUNING={poot['tuning']}" if poot.get("tuning") else "")
            )
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
