"""Drives a running poot-serve's Anthropic Messages API with the official `anthropic` Python
client (run by tests/openai_client.rs after the openai checks, on the tiny chat fixture).

Greedy text is checked against transformers' greedy text recorded in the fixture's
reference.json: /v1/messages renders the same chat prompt as /v1/chat/completions. The random
fixture model cannot be made to call a tool, so tool use is checked for shape here (a request
with tools answers a well-formed message; a conversation whose history holds a tool_use and its
tool_result renders and answers) and the call parser by the server's unit tests. Every failed
check raises; the script prints one line per group of checks.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
import urllib.parse

import anthropic

START = time.monotonic()
# Sampling fields go in the body: this client's create() no longer names them.
GREEDY = {"temperature": 0}
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use"}

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def done(what):
    print(f"[{time.monotonic() - START:6.1f} s] {what}", flush=True)


def as_anthropic(messages):
    """OpenAI-style messages as Anthropic's `system` and `messages`."""
    system = "\n".join(m["content"] for m in messages if m["role"] == "system") or anthropic.NOT_GIVEN
    rest = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    return system, rest


def check_shape(m, max_tokens):
    assert m.type == "message" and m.role == "assistant", m
    assert m.id.startswith("msg_"), m.id
    assert m.stop_reason in STOP_REASONS, m.stop_reason
    assert m.content, m
    for block in m.content:
        assert block.type in ("text", "tool_use"), block
        if block.type == "tool_use":
            assert block.id.startswith("toolu_") and isinstance(block.input, dict), block
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= max_tokens, m.usage


def check_greedy(client, model, case):
    system, messages = as_anthropic(case["messages"])
    m = client.messages.create(model=model, system=system, messages=messages, max_tokens=16, extra_body=GREEDY)
    check_shape(m, 16)
    assert [b.type for b in m.content] == ["text"], m.content
    assert m.content[0].text == case["text"], (m.content[0].text, case["text"])
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None, m
    assert m.usage.input_tokens == len(case["prompt_ids"]) and m.usage.output_tokens == 16, m.usage
    # The system prompt as text blocks is the same prompt.
    blocks = [{"type": "text", "text": system}]
    m = client.messages.create(model=model, system=blocks, messages=messages, max_tokens=16, extra_body=GREEDY)
    assert m.content[0].text == case["text"]
    n = client.messages.count_tokens(model=model, system=system, messages=messages)
    assert n.input_tokens == len(case["prompt_ids"]), n
    done("messages: ok (greedy text equals transformers; count_tokens equals the prompt)")


def check_stop_sequences(client, model, case):
    system, messages = as_anthropic(case["messages"])
    stop = case["text"][5:8]
    want = case["text"][: case["text"].index(stop)]
    m = client.messages.create(
        model=model, system=system, messages=messages, max_tokens=16, extra_body=GREEDY, stop_sequences=[stop, "never"]
    )
    assert m.content[0].text == want, (m.content[0].text, want)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop, m
    done(f"stop_sequences: ok (stop_reason stop_sequence, {stop!r})")


def check_stream(client, model, case):
    system, messages = as_anthropic(case["messages"])
    kwargs = dict(model=model, system=system, messages=messages, max_tokens=16, extra_body=GREEDY)
    # The events as the client parses them (it passes no `ping` on), in Anthropic's order.
    events = list(client.messages.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:2] == ["message_start", "content_block_start"], types
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"], types
    assert set(types[2:-3]) == {"content_block_delta"}, types
    start = events[0].message
    assert start.id.startswith("msg_") and start.content == [] and start.stop_reason is None, start
    assert start.usage.input_tokens == len(case["prompt_ids"]), start.usage
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == case["text"], (text, case["text"])
    delta = events[-2]
    assert delta.delta.stop_reason == "max_tokens" and delta.usage.output_tokens == 16, delta
    # The client's stream helper accumulates the same message.
    with client.messages.stream(**kwargs) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == case["text"] and final.content[0].text == case["text"], (streamed, final)
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 16, final
    done(f"messages streaming: ok ({len(events)} events, text equals the whole answer)")


def check_tools(client, model):
    # Tools offered: a well-formed message, whatever the random model says.
    m = client.messages.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        max_tokens=8,
        extra_body=GREEDY,
    )
    check_shape(m, 8)
    m = client.messages.create(
        model=model,
        messages=[{"role": "user", "content": "Hi"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "none"},
        max_tokens=4,
    )
    check_shape(m, 4)
    # A streamed conversation with a tool_use and its tool_result in the history.
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": '{"temperature": 21}'}]},
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    with client.messages.stream(
        model=model, system="You are a helpful assistant.", messages=history, tools=[WEATHER_TOOL], max_tokens=6, extra_body=GREEDY
    ) as stream:
        final = stream.get_final_message()
    check_shape(final, 6)
    counted = client.messages.count_tokens(
        model=model, system="You are a helpful assistant.", messages=history, tools=[WEATHER_TOOL]
    ).input_tokens
    assert final.usage.input_tokens == counted, (final.usage, counted)
    done(f"tools: ok (well-formed messages; a tool_use/tool_result history renders, {counted} prompt tokens)")


def raw_post(base_url, path, body: bytes, headers):
    url = urllib.parse.urlparse(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("POST", url.path.rstrip("/") + path, body=body, headers={"Content-Type": "application/json", **headers})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data)


def expect_error(kind, status, call, contains):
    try:
        call()
    except kind as e:
        assert e.status_code == status, (e.status_code, status, e)
        body = e.body if isinstance(e.body, dict) else {}
        assert body.get("type") == "error", body
        assert contains in body["error"]["message"], (body, contains)
        return body["error"]
    raise AssertionError(f"expected {kind.__name__} ({status})")


def check_errors(client, model, base_url, key):
    msgs = [{"role": "user", "content": "Hi"}]
    create = client.messages.create
    err = expect_error(
        anthropic.NotFoundError, 404, lambda: create(model="claude-nope", messages=msgs, max_tokens=4), "claude-nope"
    )
    assert err["type"] == "not_found_error", err
    for content, says in [
        ([{"type": "video", "source": {}}], "unknown content block type `video`"),
        ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}], "`image`"),
    ]:
        err = expect_error(
            anthropic.BadRequestError,
            400,
            lambda: create(model=model, messages=[{"role": "user", "content": content}], max_tokens=4),
            says,
        )
        assert err["type"] == "invalid_request_error", err
    expect_error(
        anthropic.BadRequestError,
        400,
        lambda: create(model=model, messages=msgs, max_tokens=4, tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "nope"}),
        "no tool named",
    )
    expect_error(anthropic.BadRequestError, 400, lambda: create(model=model, messages=msgs, max_tokens=0), "max_tokens")
    expect_error(
        anthropic.BadRequestError, 400, lambda: create(model=model, messages=msgs, max_tokens=4, extra_body={"top_k": 1000}), "top_k"
    )
    # Missing max_tokens, sent raw (the client insists on it).
    status, body = raw_post(base_url, "/v1/messages", json.dumps({"model": model, "messages": msgs}).encode(), {"x-api-key": key})
    assert status == 400 and body["error"]["type"] == "invalid_request_error", (status, body)
    assert "max_tokens" in body["error"]["message"], body
    bad = anthropic.Anthropic(base_url=base_url, api_key="wrong-key", max_retries=0)
    err = expect_error(
        anthropic.AuthenticationError, 401, lambda: bad.messages.create(model=model, messages=msgs, max_tokens=4), "API key"
    )
    assert err["type"] == "authentication_error", err
    done("errors: ok (404 not_found_error, unknown and image blocks 400, forced tools 400, missing max_tokens 400, bad key 401)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True, help="the server's root, without /v1")
    p.add_argument("--api-key", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--reference", required=True)
    a = p.parse_args()
    client = anthropic.Anthropic(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    ref = json.load(open(a.reference))
    case = next(c for c in ref["greedy"] if "messages" in c)
    check_greedy(client, a.model, case)
    check_stop_sequences(client, a.model, case)
    check_stream(client, a.model, case)
    check_tools(client, a.model)
    check_errors(client, a.model, a.base_url, a.api_key)
    done(f"anthropic {anthropic.__version__}: all checks passed")


if __name__ == "__main__":
    main()
