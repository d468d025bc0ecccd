"""Drives a running poot-serve with the official `openai` Python client (run by
tests/openai_client.rs, which starts the server on the tiny chat fixture).

Generation is checked against transformers' greedy text recorded in the fixture's
reference.json, embeddings against sentence-transformers' vectors for all-MiniLM-L6-v2
(crates/poot-models/tests/fixtures/real/minilm.json), reranking and scores against
sentence-transformers' CrossEncoder on the tiny reranker (its reference.json). Every failed check raises; the script
prints one line per group of checks.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import time
import urllib.parse

import openai

START = time.monotonic()


def done(what):
    print(f"[{time.monotonic() - START:6.1f} s] {what}", flush=True)


def expect_error(kind, status, call, code=None, param=None, contains=None):
    try:
        call()
    except kind as e:
        assert e.status_code == status, (e.status_code, status, e)
        body = e.body if isinstance(e.body, dict) else {}
        if code is not None:
            assert body.get("code") == code, (body, code)
        if param is not None:
            assert body.get("param") == param, (body, param)
        if contains is not None:
            assert contains in body.get("message", ""), (body, contains)
        return body
    raise AssertionError(f"expected {kind.__name__} ({status})")


def raw_post(base_url, path, body: bytes, key):
    url = urllib.parse.urlparse(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", url.path.rstrip("/") + path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data)


def reaches_driver(call):
    """A feature the driver may not run yet: success, or its refusal as unsupported (which
    means the request passed the server's checks and reached the driver)."""
    try:
        return call()
    except openai.BadRequestError as e:
        assert e.body.get("code") == "unsupported", e.body
        assert "not supported by this driver" in e.body["message"], e.body
        return None


def check_models(client, model, embedding_model, rerank_model):
    ids = [m.id for m in client.models.list().data]
    want = [model] + ([embedding_model] if embedding_model else []) + ([rerank_model] if rerank_model else [])
    assert ids == want, (ids, want)
    assert client.models.retrieve(model).id == model
    expect_error(openai.NotFoundError, 404, lambda: client.models.retrieve("nope"), code="model_not_found")
    done("models: ok")


def check_completions(client, model, ref):
    for case in ref["greedy"]:
        if "messages" in case:
            continue
        r = client.completions.create(model=model, prompt=case["prompt"], max_tokens=16, temperature=0)
        c = r.choices[0]
        assert c.text == case["text"], (c.text, case["text"])
        assert c.finish_reason == "length", c.finish_reason
        assert r.object == "text_completion"
        assert r.usage.prompt_tokens == len(case["prompt_ids"]), r.usage
        assert r.usage.completion_tokens == 16 and r.usage.total_tokens == 16 + len(case["prompt_ids"]), r.usage
    # Token-id prompts give the same text.
    case = ref["greedy"][0]
    r = client.completions.create(model=model, prompt=case["prompt_ids"], max_tokens=16, temperature=0)
    assert r.choices[0].text == case["text"]
    # Several prompts: choices in prompt order.
    prompts = [c["prompt"] for c in ref["greedy"][:2]]
    r = client.completions.create(model=model, prompt=prompts, max_tokens=16, temperature=0)
    assert [c.text for c in r.choices] == [c["text"] for c in ref["greedy"][:2]]
    assert [c.index for c in r.choices] == [0, 1]
    # echo puts the prompt first.
    r = client.completions.create(model=model, prompt=case["prompt"], max_tokens=16, temperature=0, echo=True)
    assert r.choices[0].text == case["prompt"] + case["text"]
    done("completions: ok (greedy text equals transformers)")


def check_stops(client, model, ref):
    case = ref["greedy"][0]
    stop = case["text"][5:8]
    want = case["text"][: case["text"].index(stop)]
    r = client.completions.create(model=model, prompt=case["prompt"], max_tokens=16, temperature=0, stop=[stop, "never"])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop", (r.choices[0], want)
    chunks = client.completions.create(
        model=model, prompt=case["prompt"], max_tokens=16, temperature=0, stop=stop, stream=True
    )
    text, finishes = "", []
    for ch in chunks:
        for c in ch.choices:
            text += c.text
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert text == want and finishes == ["stop"], (text, want, finishes)
    done(f"stop strings: ok ({stop!r} never streamed)")


def check_chat(client, model, ref):
    case = next(c for c in ref["greedy"] if "messages" in c)
    r = client.chat.completions.create(model=model, messages=case["messages"], max_tokens=16, temperature=0)
    m = r.choices[0].message
    assert m.role == "assistant" and m.content == case["text"], (m, case["text"])
    assert r.choices[0].finish_reason == "length"
    assert r.object == "chat.completion"
    assert r.usage.prompt_tokens == len(case["prompt_ids"]) and r.usage.completion_tokens == 16, r.usage
    # A conversation with a tools list, an assistant tool call and a tool result renders.
    conv = ref["chat"]
    r = client.chat.completions.create(
        model=model, messages=conv["messages"], tools=conv["tools"], max_tokens=4, temperature=0
    )
    assert isinstance(r.choices[0].message.content, str) and r.usage.completion_tokens == 4, r
    # Content given as parts is the same prompt.
    parts = [dict(msg) for msg in case["messages"]]
    parts[-1]["content"] = [{"type": "text", "text": parts[-1]["content"]}]
    r = client.chat.completions.create(model=model, messages=parts, max_tokens=16, temperature=0)
    assert r.choices[0].message.content == case["text"]
    done("chat: ok (greedy text equals transformers; tools and tool messages render)")
    return case


def check_chat_stream(client, model, case):
    stream = client.chat.completions.create(
        model=model,
        messages=case["messages"],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == case["text"], (text, case["text"])
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"], finishes
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.prompt_tokens == len(case["prompt_ids"]) and last.usage.completion_tokens == 16, last.usage
    assert all(c.usage is None for c in chunks[:-1])
    # Without include_usage no chunk carries usage.
    chunks = list(
        client.chat.completions.create(model=model, messages=case["messages"], max_tokens=16, temperature=0, stream=True)
    )
    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == case["text"]
    done(f"chat streaming: ok ({len(chunks)} chunks, usage in the last with include_usage)")


def check_sampling(client, model):
    def run():
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=8,
            temperature=0.9,
            top_p=0.95,
            seed=7,
            n=2,
        )
        assert [c.index for c in r.choices] == [0, 1]
        assert r.usage.completion_tokens == 16, r.usage
        return [c.message.content for c in r.choices]

    first, again = run(), run()
    assert first == again, (first, again)
    assert first[0] != first[1], first
    done("sampling: ok (n=2 choices differ, a seed reproduces them)")


def check_driver_features(client, model):
    messages = [{"role": "user", "content": "Hi"}]
    r = reaches_driver(
        lambda: client.chat.completions.create(
            model=model, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
        )
    )
    if r is not None:
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in content)
    for extra in [
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"extra_body": {"repetition_penalty": 1.2}},
        {"logit_bias": {"5": -100}},
    ]:
        reaches_driver(
            lambda: client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0, **extra)
        )
    r = reaches_driver(lambda: client.completions.create(model=model, prompt="Hi", max_tokens=4, temperature=0, logprobs=2))
    if r is not None:
        assert len(r.choices[0].logprobs.tokens) == 4
    done("penalties, logit_bias, logprobs: reach the driver")


def check_errors(client, model, base_url, key, context):
    chat = client.chat.completions.create
    msgs = [{"role": "user", "content": "Hi"}]
    expect_error(openai.NotFoundError, 404, lambda: chat(model="gpt-4o", messages=msgs), code="model_not_found", param="model")
    expect_error(
        openai.NotFoundError,
        404,
        lambda: client.completions.create(model="gpt-4o", prompt="x"),
        code="model_not_found",
    )
    long_prompt = "Hello, world! " * context
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.completions.create(model=model, prompt=long_prompt, max_tokens=4),
        code="context_length_exceeded",
    )
    expect_error(
        openai.BadRequestError,
        400,
        lambda: chat(model=model, messages=[{"role": "user", "content": long_prompt}]),
        code="context_length_exceeded",
    )
    expect_error(
        openai.BadRequestError,
        400,
        lambda: chat(model=model, messages=msgs, max_tokens=context),
        code="context_length_exceeded",
    )
    for field, value in [
        ("temperature", 5),
        ("top_p", 0),
        ("n", 0),
        ("max_tokens", 0),
        ("presence_penalty", 9),
        ("logit_bias", {"99999": 1}),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("top_logprobs", 3),
    ]:
        expect_error(openai.BadRequestError, 400, lambda: chat(model=model, messages=msgs, **{field: value}), param=field)
    expect_error(openai.BadRequestError, 400, lambda: chat(model=model, messages=[{"role": "wizard", "content": "x"}]))
    expect_error(openai.BadRequestError, 400, lambda: chat(model=model, messages=[]))
    # Malformed JSON, sent raw (the client would never send it).
    status, body = raw_post(base_url, "/chat/completions", b'{"model": "x", "messages": [', key)
    assert status == 400 and body["error"]["type"] == "invalid_request_error", (status, body)
    status, body = raw_post(base_url, "/completions", b'{"model": 3}', key)
    assert status == 400 and "error" in body, (status, body)
    # Keys: a wrong one, and none at all (sent raw: the client insists on one).
    bad = openai.OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0)
    expect_error(openai.AuthenticationError, 401, lambda: bad.models.list(), code="invalid_api_key")
    expect_error(openai.AuthenticationError, 401, lambda: bad.chat.completions.create(model=model, messages=msgs))
    status, body = raw_post(base_url, "/chat/completions", json.dumps({"model": model, "messages": msgs}).encode(), None)
    assert status == 401 and body["error"]["code"] == "invalid_api_key", (status, body)
    done("errors: ok (unknown model 404, context 400, invalid parameters 400, malformed JSON 400, bad key 401)")


def as_input(messages):
    """Chat messages as Responses input items (content as input_text parts)."""
    return [{"role": m["role"], "content": [{"type": "input_text", "text": m["content"]}]} for m in messages]


def check_responses(client, model, case):
    r = client.responses.create(model=model, input=as_input(case["messages"]), max_output_tokens=16, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_"), r
    assert r.output_text == case["text"], (r.output_text, case["text"])
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
    [item] = r.output
    assert item.type == "message" and item.role == "assistant" and item.content[0].type == "output_text", item
    assert r.usage.input_tokens == len(case["prompt_ids"]) and r.usage.output_tokens == 16, r.usage
    assert r.usage.total_tokens == 16 + len(case["prompt_ids"]), r.usage
    # The system message as `instructions` is the same prompt.
    system = next(m["content"] for m in case["messages"] if m["role"] == "system")
    rest = [m for m in case["messages"] if m["role"] != "system"]
    r = client.responses.create(
        model=model, instructions=system, input=rest[0]["content"], max_output_tokens=16, temperature=0
    )
    assert r.output_text == case["text"], (r.output_text, case["text"])
    done("responses: ok (greedy text equals transformers; incomplete at max_output_tokens)")


def check_responses_stream(client, model, case):
    kwargs = dict(model=model, input=as_input(case["messages"]), max_output_tokens=16, temperature=0)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ], types
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ], types
    assert set(types[4:-4]) == {"response.output_text.delta"}, types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == case["text"], (text, case["text"])
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == case["text"], last
    assert last.usage.output_tokens == 16, last.usage
    assert events[0].response.id == last.id and events[0].response.status == "in_progress"
    # The client's stream helper follows the same events.
    with client.responses.stream(**kwargs) as stream:
        helped = [e for e in stream]
    deltas = "".join(e.delta for e in helped if e.type == "response.output_text.delta")
    assert deltas == case["text"] and helped[-1].type == "response.incomplete", (deltas, helped[-1].type)
    done(f"responses streaming: ok ({len(events)} events numbered in order)")


def check_responses_tools(client, model):
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    history = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temperature": 21}'},
    ]
    r = client.responses.create(model=model, input=history, tools=tools, max_output_tokens=4, temperature=0)
    assert r.status in ("completed", "incomplete") and r.output, r
    for item in r.output:
        assert item.type in ("message", "function_call"), item
        if item.type == "function_call":
            assert item.name == "get_weather" and item.call_id, item
    events = list(client.responses.create(model=model, input=history, tools=tools, max_output_tokens=4, stream=True))
    assert events[-1].type in ("response.completed", "response.incomplete"), events[-1]
    assert events[-1].response.usage.input_tokens == r.usage.input_tokens
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.responses.create(model=model, input="Hi", previous_response_id="resp_123"),
        param="previous_response_id",
        contains="stores no responses",
    )
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.responses.create(model=model, input="Hi", tools=[{"type": "web_search"}]),
        contains="`web_search`",
    )
    # store: true is accepted; nothing is stored.
    r = client.responses.create(model=model, input="Hi", store=True, max_output_tokens=2)
    assert r.store is False, r
    done("responses tools: ok (function_call history renders; previous_response_id and hosted tools refused)")


def check_chat_tools(client, model, ref):
    conv = ref["chat"]
    for stream in (False, True):
        kwargs = dict(model=model, messages=conv["messages"], tools=conv["tools"], max_tokens=4, temperature=0)
        if not stream:
            m = client.chat.completions.create(**kwargs).choices[0]
            assert m.finish_reason in ("stop", "length", "tool_calls"), m
            assert m.message.content is not None or m.message.tool_calls, m
            continue
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls"), finishes
    # A forced call (guided decoding) comes back parsed, its arguments valid under the schema.
    city_tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]},
        },
    }
    m = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[city_tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=100,
    ).choices[0]
    assert m.finish_reason == "tool_calls" and len(m.message.tool_calls) == 1, m
    assert json.loads(m.message.tool_calls[0].function.arguments)["city"] in ("Paris", "Rome"), m
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.chat.completions.create(
            model=model, messages=conv["messages"], tool_choice="required"
        ),
        param="tool_choice",
    )
    done("chat tools: ok (answers with tools are well-formed; a forced call is parsed)")


def check_json_schema(client, model):
    """A strict JSON-schema answer (compact JSON, so the random model cannot wander in blanks)
    parses and holds the schema's fields."""
    schema = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Rome"]}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
        "x-guidance": {"whitespace_flexible": False},
    }
    m = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": schema, "strict": True}},
        max_tokens=120,
        temperature=0,
    ).choices[0]
    assert m.finish_reason == "stop", m
    answer = json.loads(m.message.content)
    assert set(answer) == {"city", "sunny"} and answer["city"] in ("Paris", "Rome"), answer
    assert isinstance(answer["sunny"], bool), answer
    done(f"json_schema: ok ({m.message.content})")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def check_embeddings(client, model, embedding_model, minilm_path):
    # One call with two short sentences: an encoder step is slow on software Vulkan.
    ref = json.load(open(minilm_path))
    picked = [i for i, ids in enumerate(ref["input_ids"]) if len(ids) <= 16][:2]
    sentences = [ref["sentences"][i] for i in picked]
    want = [ref["embeddings"][i] for i in picked]
    r = client.embeddings.create(model=embedding_model, input=sentences)  # base64 on the wire
    assert [d.index for d in r.data] == list(range(len(sentences)))
    for d, w, s in zip(r.data, want, sentences):
        assert len(d.embedding) == len(w) == 384
        distance = 1 - cosine(d.embedding, w)
        assert distance <= 1e-4, (s, distance)
    assert r.usage.prompt_tokens == sum(len(ref["input_ids"][i]) for i in picked), r.usage
    expect_error(openai.BadRequestError, 400, lambda: client.embeddings.create(model=model, input="x"))
    expect_error(openai.NotFoundError, 404, lambda: client.embeddings.create(model="nope", input="x"))
    expect_error(openai.BadRequestError, 400, lambda: client.embeddings.create(model=embedding_model, input=""))
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.embeddings.create(model=embedding_model, input="x " * 100),
        code="context_length_exceeded",
    )
    expect_error(
        openai.BadRequestError, 400, lambda: client.embeddings.create(model=embedding_model, input="x", dimensions=8)
    )
    done(f"embeddings: ok ({len(sentences)} sentences within 1e-4 cosine of sentence-transformers)")


def check_rerank(client, model, rerank_model, reference_path):
    # The client has no rerank method: its generic post, as users of vLLM's and Jina's rerank
    # routes call them, with the client's key, errors and retries.
    ref = json.load(open(reference_path))
    for case in ref["cases"]:
        r = client.post(
            "/rerank",
            body={"model": rerank_model, "query": case["query"], "documents": case["documents"]},
            cast_to=object,
        )
        order = [x["index"] for x in r["results"]]
        assert order == case["ranking"], (order, case["ranking"])
        for x in r["results"]:
            want = case["scores"][x["index"]]
            assert abs(x["relevance_score"] - want) <= 1e-5, (x, want)
            assert x["document"]["text"] == case["documents"][x["index"]]
        s = client.post(
            "/score", body={"model": rerank_model, "text_1": case["query"], "text_2": case["documents"]}, cast_to=object
        )
        got = [d["score"] for d in s["data"]]
        assert all(abs(a - b) <= 1e-5 for a, b in zip(got, case["scores"])), (got, case["scores"])
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.post("/rerank", body={"query": "cats", "documents": []}, cast_to=object),
        param="documents",
    )
    expect_error(
        openai.BadRequestError,
        400,
        lambda: client.post("/rerank", body={"model": model, "query": "a", "documents": ["b"]}, cast_to=object),
        param="model",
    )
    expect_error(
        openai.NotFoundError,
        404,
        lambda: client.post("/rerank", body={"model": "nope", "query": "a", "documents": ["b"]}, cast_to=object),
    )
    done(f"rerank and score: ok ({len(ref['cases'])} queries in CrossEncoder's order, scores within 1e-5)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--embedding-model")
    p.add_argument("--minilm-reference")
    p.add_argument("--rerank-model")
    p.add_argument("--rerank-reference")
    a = p.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    ref = json.load(open(a.reference))
    check_models(client, a.model, a.embedding_model, a.rerank_model)
    check_completions(client, a.model, ref)
    check_stops(client, a.model, ref)
    case = check_chat(client, a.model, ref)
    check_chat_stream(client, a.model, case)
    check_sampling(client, a.model)
    check_driver_features(client, a.model)
    check_chat_tools(client, a.model, ref)
    check_json_schema(client, a.model)
    check_responses(client, a.model, case)
    check_responses_stream(client, a.model, case)
    check_responses_tools(client, a.model)
    check_errors(client, a.model, a.base_url, a.api_key, a.context)
    if a.embedding_model:
        check_embeddings(client, a.model, a.embedding_model, a.minilm_reference)
    else:
        print("SKIP embeddings: no embedding model (scripts/fetch-models.sh minilm)")
    if a.rerank_model:
        check_rerank(client, a.model, a.rerank_model, a.rerank_reference)
    done(f"openai {openai.__version__}: all checks passed")


if __name__ == "__main__":
    main()
