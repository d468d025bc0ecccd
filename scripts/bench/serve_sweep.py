#!/usr/bin/env python3
"""A serving benchmark over an OpenAI-compatible /v1/completions route (standard library only,
so it runs on the GPU machine without pip). It drives poot-serve and llama.cpp's llama-server
the same way: streamed greedy completions whose prompts are token ids (so both engines see the
same prompt lengths), `ignore_eos` so every request generates exactly its max_tokens.

For each concurrency level C it sends max(C, --min-requests) requests through C client threads
and reports:
  - output tok/s: every generated token over the level's wall time;
  - TTFT p50/p99: seconds from sending a request to its first streamed token;
  - ITL p50/p99: seconds between consecutive streamed events of one request (an engine that
    sends tokens in bursts shows short gaps and long ones, as a client sees them).

Loads: `fixed` (every prompt --prompt-tokens long, --max-tokens out) and `spread` (prompt and
output lengths drawn uniformly from [L/4, 2L] and [M/4, 2M] with a fixed seed).

  serve_sweep.py --url http://127.0.0.1:8080 --vocab 49152 --concurrency 1,8,64 --load fixed \
      --json out.json

Prints one markdown row per level and writes every figure as JSON when asked.
"""

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.request


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def one_request(url, model, prompt_ids, max_tokens, timeout):
    """Streams one completion; returns (ttft, [gaps], tokens, error, decode seconds)."""
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    sent = time.perf_counter()
    first, last, gaps, events, usage = None, None, [], 0, None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("usage"):
                    usage = msg["usage"].get("completion_tokens")
                choices = msg.get("choices") or []
                if not choices or not choices[0].get("text"):
                    continue
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                events += 1
    except Exception as e:  # noqa: BLE001 - any failure is reported as a lost request
        return None, [], 0, str(e), 0.0
    if first is None:
        return None, [], 0, "no token streamed", 0.0
    return first - sent, gaps, usage if usage is not None else events, None, last - first


def run_level(args, concurrency, lengths):
    results = [None] * len(lengths)
    next_index = [0]
    lock = threading.Lock()
    rng = random.Random(7)
    prompts = [
        [rng.randrange(100, args.vocab - 100) for _ in range(p)] for p, _ in lengths
    ]

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(lengths):
                return
            results[i] = one_request(
                args.url, args.model, prompts[i], lengths[i][1], args.timeout
            )

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ok = [r for r in results if r and r[3] is None]
    errors = [r[3] for r in results if r and r[3] is not None]
    tokens = sum(r[2] for r in ok)
    ttft = [r[0] for r in ok]
    gaps = [g for r in ok for g in r[1]]
    # Each request's decode speed after its first token (a lone request's is its stream speed).
    per_request = [(r[2] - 1) / r[4] for r in ok if r[4] > 0 and r[2] > 1]
    return {
        "concurrency": concurrency,
        "requests": len(lengths),
        "completed": len(ok),
        "errors": errors[:5],
        "output_tokens": tokens,
        "wall_s": wall,
        "output_tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p99_s": percentile(ttft, 0.99),
        "itl_p50_s": percentile(gaps, 0.5),
        "itl_p99_s": percentile(gaps, 0.99),
        "ttft_mean_s": statistics.fmean(ttft) if ttft else float("nan"),
        "decode_tok_s_per_request_p50": percentile(per_request, 0.5),
    }


def lengths_for(load, n, prompt_tokens, max_tokens, seed):
    if load == "fixed":
        return [(prompt_tokens, max_tokens)] * n
    rng = random.Random(seed)
    return [
        (
            rng.randint(max(1, prompt_tokens // 4), 2 * prompt_tokens),
            rng.randint(max(1, max_tokens // 4), 2 * max_tokens),
        )
        for _ in range(n)
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", help="default: the first id /v1/models lists")
    ap.add_argument("--vocab", type=int, required=True, help="token ids are drawn below this")
    ap.add_argument("--concurrency", default="1,8,32,64,128")
    ap.add_argument("--load", choices=["fixed", "spread"], default="fixed")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--min-requests", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="write every level's figures here")
    args = ap.parse_args()
    if not args.model:
        with urllib.request.urlopen(args.url + "/v1/models", timeout=30) as resp:
            args.model = json.load(resp)["data"][0]["id"]
    levels = [int(c) for c in args.concurrency.split(",") if c]
    out = []
    print("| engine | load | C | requests | lost | out tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | per-request decode tok/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in levels:
        n = max(c, args.min_requests)
        row = run_level(args, c, lengths_for(args.load, n, args.prompt_tokens, args.max_tokens, c))
        row["load"] = args.load
        row["label"] = args.label
        out.append(row)
        print(
            f"| {args.label} | {args.load} | {c} | {n} | {n - row['completed']} | "
            f"{row['output_tok_s']:.1f} | {row['ttft_p50_s']:.3f} | {row['ttft_p99_s']:.3f} | "
            f"{row['itl_p50_s'] * 1e3:.1f} ms | {row['itl_p99_s'] * 1e3:.1f} ms | "
            f"{row['decode_tok_s_per_request_p50']:.1f} |",
            flush=True,
        )
        if row["errors"]:
            print(f"  errors: {row['errors']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
