#!/usr/bin/env python3
"""Renders conversations with llama.cpp's built-in chat templates through llama-cpp-python
(`llama_chat_apply_template` with a template name and no model), for the formats poot falls back
to when a GGUF has no chat template. Writes the cases poot-text's test compares with.

Usage: python3 scripts/ref/llama_cpp_chat_fallbacks.py crates/poot-text/tests/fixtures/llama_cpp_fallbacks.json
"""

import ctypes
import json
import sys

import llama_cpp

CONVERSATIONS = [
    # llama.cpp's tests/test-chat-template.cpp conversation.
    [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ],
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "  What is 2+2?  "},
    ],
    [
        {"role": "user", "content": "Line one\nline two"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "A late system note"},
        {"role": "user", "content": "and?"},
    ],
    [{"role": "system", "content": "Only a system message"}],
]


def render(template: str, messages) -> str:
    chat = (llama_cpp.llama_chat_message * len(messages))()
    keep = []
    for i, m in enumerate(messages):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        chat[i].role = role
        chat[i].content = content
    name = template.encode()
    n = llama_cpp.llama_chat_apply_template(name, chat, len(messages), True, None, 0)
    if n < 0:
        raise SystemExit(f"llama.cpp does not know the template {template!r}")
    buf = ctypes.create_string_buffer(n + 1)
    llama_cpp.llama_chat_apply_template(name, chat, len(messages), True, buf, n + 1)
    return buf.raw[:n].decode()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cases = [
        {"format": fmt, "messages": conv, "rendered": render(fmt, conv)}
        for fmt in ("gemma", "chatml")
        for conv in CONVERSATIONS
    ]
    out = {
        "source": f"llama-cpp-python {llama_cpp.__version__}, llama_chat_apply_template(name, ..., add_ass=true)",
        "cases": cases,
    }
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
