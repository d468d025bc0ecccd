#!/usr/bin/env python3
"""A bounded load test of a running poot-serve (standard library only, so it runs on the GPU
machine without pip).

Each of N distinct greedy completion requests is first run alone, one after another (the
reference), then all N are sent at once over N concurrent streaming connections. Every
concurrent response must equal its lone run token for token (the server batches them into
shared decode steps over the paged KV pool); no request may be lost. While the concurrent
phase runs, /metrics/prometheus is sampled for the KV blocks in use.

Prints a markdown table: lone and concurrent tokens/s, the ratio, peak KV blocks in use.

  serve_load.py --url http://127.0.0.1:8080 --clients 64 --max-tokens 64
"""

import argparse
import concurrent.futures
import json
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a land far away,",
    "The three primary colors are",
    "To make a cup of tea, first",
    "The largest planet in the solar system is",
    "Water boils at a temperature of",
    "A haiku about autumn:",
    "The quick brown fox",
]


def prompt(i):
    return f"{PROMPTS[i % len(PROMPTS)]} (request {i})"


def post(url, body, stream):
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        if not stream:
            data = json.load(resp)
            return data["choices"][0]["text"], data["usage"]["completion_tokens"]
        text, tokens = [], 0
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                text.append(c.get("text", ""))
        return "".join(text), tokens


def request(args, i, stream):
    body = {
        "model": args.model,
        "prompt": prompt(i),
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return post(args.url, body, stream)


def kv_blocks_used(url):
    with urllib.request.urlopen(url + "/metrics/prometheus", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("poot_kv_blocks_used"):
                return float(line.split()[-1])
    return 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()

    # Lone runs: the reference and the single-stream rate.
    lone, lone_tokens, t0 = [], 0, time.time()
    for i in range(args.clients):
        text, n = request(args, i, stream=False)
        lone.append(text)
        lone_tokens += n
    lone_s = time.time() - t0

    # All at once, streaming.
    peak = [0.0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], kv_blocks_used(args.url))
            except OSError:
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        futures = [pool.submit(request, args, i, True) for i in range(args.clients)]
        results = []
        for f in futures:
            try:
                results.append(f.result())
            except Exception as e:  # a lost request is a failure, reported below
                results.append((None, repr(e)))
    together_s = time.time() - t0
    done.set()
    watcher.join()

    lost = [i for i, (text, _) in enumerate(results) if text is None]
    differ = [i for i, (text, _) in enumerate(results) if text is not None and text != lone[i]]
    together_tokens = sum(n for text, n in results if text is not None)
    print(f"| clients | max_tokens | lone tok/s | concurrent tok/s | ratio | peak KV blocks used | lost | differ |")
    print(f"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    lone_rate = lone_tokens / lone_s
    rate = together_tokens / together_s
    print(
        f"| {args.clients} | {args.max_tokens} | {lone_rate:.0f} | {rate:.0f} | "
        f"{rate / lone_rate:.1f}x | {peak[0]:.0f} | {len(lost)} | {len(differ)} |"
    )
    for i in differ[:3]:
        print(f"request {i} differs:\n  alone:    {lone[i]!r}\n  together: {results[i][0]!r}")
    for i in lost[:3]:
        print(f"request {i} lost: {results[i][1]}")
    sys.exit(1 if lost or differ else 0)


if __name__ == "__main__":
    main()
