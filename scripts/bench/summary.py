#!/usr/bin/env python3
"""Writes a run folder's summary.json from the raw results bench/h200.sh left in it.

  summary.py RUN_DIR --commit SHA --device "NVIDIA H200" [--extra rows.json]

Reads, where present:
  batched/NAME.rowsN.poot.json + batched/NAME.batched.llama.jsonl
      -> decode_rows16 / decode_rows64 (poot total decode tok/s over llama-batched-bench's S_TG)
  serve/NAME.serve.{fixed,spread}.{poot,llama}.json
      -> serve_tok_s_cC at every concurrency C (output tok/s; `_spread` for the spread load),
         serve_ttft_p99_c64 (seconds; the ratio is llama-server's over poot's, so above 1
         means poot is better)
  serve/NAME.serve.bench.poot.json -> lone_vs_bench (the C=1 level's per-request decode
         tok/s over `poot bench`'s one-row decode in the same call)
  serve/NAME.serve.poot.ready-warm.json -> ready_s (no peer: llama-server's was not timed)
  gpu/NAME.poot.json + gpu/NAME.llama.json (`bench/h200.sh bench`)
      -> decode_b1 and prefill_ppP, as below without the prefix
  spec/spec-{lookup,draft}.poot.json + .llama.log (`bench/h200.sh spec`)
      -> spec_lookup_tok_s, spec_draft_tok_s (decode tok/s with speculation, poot over
         llama-lookup / llama-speculative)
  cpu/NAME.poot.json + cpu/NAME.llama.json (`bench/h200.sh bench` with BACKEND=cpu)
      -> cpu_decode_b1 (decode tok/s after the prompt, llama-bench's tg at that depth) and
         cpu_prefill_ppP (prefill tok/s over P prompt tokens)
--extra adds rows written by hand (a JSON list in the same shape).

Each row: {"model", "metric", "poot", "peer", "peer_name", "ratio", "device", "commit"}; the ratio
is oriented so that above 1 means poot is better.
"""

import argparse
import glob
import json
import os
import re


def row(model, metric, poot, peer, peer_name, args, lower_is_better=False):
    ratio = None
    if poot is not None and peer is not None and poot > 0 and peer > 0:
        ratio = round(peer / poot if lower_is_better else poot / peer, 3)
    return {
        "model": model,
        "metric": metric,
        "poot": poot,
        "peer": peer,
        "peer_name": peer_name,
        "ratio": ratio,
        "device": args.device,
        "commit": args.commit,
    }


def single_rows(args, sub, prefix, peer_name):
    """`bench/h200.sh bench` results in RUN/SUB: decode after the prompt and prefill, one row each."""
    rows = []
    for path in sorted(glob.glob(os.path.join(args.run_dir, sub, "*.poot.json"))):
        name = os.path.basename(path).split(".")[0]
        with open(path) as f:
            poot = json.load(f)
        llama = []
        lp = path.replace(".poot.json", ".llama.json")
        if os.path.exists(lp):
            with open(lp) as f:
                try:
                    llama = json.load(f)
                except ValueError:
                    llama = []
        p, n = poot["prompt_tokens"], poot["gen_tokens"]

        def llama_rate(n_prompt, n_gen, depth):
            for t in llama:
                if (t.get("n_prompt"), t.get("n_gen"), t.get("n_depth", 0)) == (n_prompt, n_gen, depth):
                    return round(float(t["avg_ts"]), 2)
            return None

        rows.append(row(name, f"{prefix}decode_b1", round(poot["decode_tok_s"], 2),
                        llama_rate(0, n, p), peer_name, args))
        rows.append(row(name, f"{prefix}prefill_pp{p}", round(poot["prefill_tok_s"], 2),
                        llama_rate(p, 0, 0), peer_name, args))
    return rows


def spec_rows(args):
    """`bench/h200.sh spec` results in RUN/spec: poot's decode with speculation over
    llama-lookup's / llama-speculative's ("decoded N tokens in T seconds, speed: S t/s")."""
    rows = []
    for name, metric, model in (("lookup", "spec_lookup_tok_s", "smollm2"),
                                ("draft", "spec_draft_tok_s", "llama1b-smolvocab")):
        pp = os.path.join(args.run_dir, "spec", f"spec-{name}.poot.json")
        lp = os.path.join(args.run_dir, "spec", f"spec-{name}.llama.log")
        if not os.path.exists(pp):
            continue
        with open(pp) as f:
            poot = round(json.load(f)["decode_tok_s"], 1)
        peer = None
        if os.path.exists(lp):
            with open(lp) as f:
                m = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", f.read())
            peer = round(float(m.group(1)), 1) if m else None
        program = "llama-lookup" if name == "lookup" else "llama-speculative"
        rows.append(row(model, metric, poot, peer, program, args))
    return rows



def serve_levels(args, name, load, engine):
    """Concurrency -> the sweep's figures for one engine and load, or {}."""
    p = os.path.join(args.run_dir, "serve", f"{name}.serve.{load}.{engine}.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return {r["concurrency"]: r for r in json.load(f)}


def serve_rows(args, name):
    """Output tok/s at every concurrency of each load (`serve_tok_s_cC`, `_spread` for the
    spread load), TTFT p99 at 64 clients, a lone request's decode speed over `poot bench`'s
    (`lone_vs_bench`: the C=1 level's per-request decode tok/s, beside NAME.serve.bench.poot.json
    from the same call) and the warm ready time."""
    rows = []
    for load, suffix in (("fixed", ""), ("spread", "_spread")):
        poot = serve_levels(args, name, load, "poot")
        llama = serve_levels(args, name, load, "llama")
        for c in sorted(poot):
            rows.append(
                row(name, f"serve_tok_s_c{c}{suffix}", round(poot[c]["output_tok_s"], 1),
                    round(llama[c]["output_tok_s"], 1) if c in llama else None,
                    "llama-server", args)
            )
        if 64 in poot:
            rows.append(
                row(name, f"serve_ttft_p99_c64{suffix}", round(poot[64]["ttft_p99_s"], 3),
                    round(llama[64]["ttft_p99_s"], 3) if 64 in llama else None,
                    "llama-server", args, lower_is_better=True)
            )
    fixed = serve_levels(args, name, "fixed", "poot")
    bp = os.path.join(args.run_dir, "serve", f"{name}.serve.bench.poot.json")
    if 1 in fixed and os.path.exists(bp):
        with open(bp) as f:
            bench = json.load(f)["decode_tok_s"]
        rows.append(
            row(name, "lone_vs_bench", round(fixed[1]["decode_tok_s_per_request_p50"], 1),
                round(bench, 1), "poot bench (one row)", args)
        )
    rp = os.path.join(args.run_dir, "serve", f"{name}.serve.poot.ready-warm.json")
    if os.path.exists(rp):
        with open(rp) as f:
            ready = json.load(f)["ready_s"]
        rows.append(row(name, "ready_s", ready, None, None, args))
    return rows

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--device", default="NVIDIA H200")
    ap.add_argument("--extra")
    args = ap.parse_args()
    rows = []
    for path in sorted(glob.glob(os.path.join(args.run_dir, "batched", "*.batched.llama.jsonl"))):
        name = os.path.basename(path).split(".")[0]
        llama = {}
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    d = json.loads(line)
                    llama[d["pl"]] = d
        for n in (16, 64):
            p = os.path.join(args.run_dir, "batched", f"{name}.rows{n}.poot.json")
            if not os.path.exists(p) or n not in llama:
                continue
            with open(p) as f:
                poot = json.load(f)
            rows.append(
                row(name, f"decode_rows{n}", round(poot["decode_tok_s"], 1),
                    round(llama[n]["speed_tg"], 1), "llama-batched-bench S_TG", args)
            )
    for path in sorted(glob.glob(os.path.join(args.run_dir, "serve", "*.serve.fixed.poot.json"))):
        name = os.path.basename(path).split(".")[0]
        rows.extend(serve_rows(args, name))
    for sub, prefix, peer_name in (("gpu", "", "llama-bench"), ("cpu", "cpu_", "llama-bench (CPU)")):
        rows.extend(single_rows(args, sub, prefix, peer_name))
    rows.extend(spec_rows(args))
    if args.extra:
        with open(args.extra) as f:
            rows.extend(json.load(f))
    out = os.path.join(args.run_dir, "summary.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(f"{r['model']:16} {r['metric']:20} poot {r['poot']!s:>9} peer {r['peer']!s:>9} ratio {r['ratio']}")


if __name__ == "__main__":
    main()
