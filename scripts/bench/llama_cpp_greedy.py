#!/usr/bin/env python3
"""llama.cpp's greedy continuation of a prompt, through llama-cpp-python, as one JSON object:
{"prompt_ids": [...], "tokens": [...]} (the prompt tokenized with BOS, then `n` greedy tokens,
end-of-text ignored). The reference `poot run --json` is compared with on synthetic models.

Usage: llama_cpp_greedy.py MODEL.gguf PROMPT N
"""

import json
import sys

import llama_cpp


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True, verbose=False, seed=0)
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(ids)
    tokens = []
    for _ in range(n):
        logits = llm.eval_logits[-1]
        best = max(range(len(logits)), key=logits.__getitem__)
        tokens.append(best)
        llm.eval([best])
    print(json.dumps({"prompt_ids": ids, "tokens": tokens}))


if __name__ == "__main__":
    main()
