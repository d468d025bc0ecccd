"""Drives poot-serve on SmolLM2-135M-Instruct (a real checkpoint) with the official `openai`
and `anthropic` clients (run by tests/smollm2_clients.rs): a JSON-schema answer that parses
and validates, a forced tool call that parses, a streamed Messages conversation with a tool
round trip, and a Responses call. Greedy throughout; every failed check raises, and the script
prints one line per check.
"""

from __future__ import annotations

import argparse
import json
import time

import anthropic
import openai

START = time.monotonic()
CITIES = ["Paris", "Rome", "Tokyo"]
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": CITIES},
        "continent": {"enum": ["Europe", "Asia", "Africa", "America", "Oceania"]},
        "is_capital": {"type": "boolean"},
    },
    "required": ["city", "continent", "is_capital"],
    "additionalProperties": False,
}
CITY_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"enum": CITIES}},
    "required": ["city"],
    "additionalProperties": False,
}


def done(what):
    print(f"[{time.monotonic() - START:6.1f} s] {what}", flush=True)


def valid_answer(value):
    """ANSWER_SCHEMA, checked by hand (the client environment has no schema validator)."""
    assert isinstance(value, dict) and set(value) == set(ANSWER_SCHEMA["required"]), value
    props = ANSWER_SCHEMA["properties"]
    assert value["city"] in props["city"]["enum"], value
    assert value["continent"] in props["continent"]["enum"], value
    assert isinstance(value["is_capital"], bool), value


def check_json_schema(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me about Paris as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": ANSWER_SCHEMA, "strict": True}},
        max_tokens=64,
        temperature=0,
    ).choices[0]
    assert r.finish_reason == "stop", r
    answer = json.loads(r.message.content)
    valid_answer(answer)
    done(f"openai json_schema: ok ({r.message.content!r})")


def check_forced_tool_call(client, model):
    tool = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": CITY_PARAMETERS}}
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        temperature=0,
    ).choices[0]
    assert r.finish_reason == "tool_calls" and len(r.message.tool_calls) == 1, r
    call = r.message.tool_calls[0]
    assert call.function.name == "get_weather", call
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city"} and arguments["city"] in CITIES, arguments
    done(f"openai forced tool call: ok (get_weather({call.function.arguments}))")


def check_messages_tool_round_trip(client, model):
    tool = {"name": "get_weather", "description": "The weather in a city.", "input_schema": CITY_PARAMETERS}
    question = [{"role": "user", "content": "What is the weather in Tokyo?"}]
    greedy = {"temperature": 0}
    with client.messages.stream(
        model=model, messages=question, tools=[tool], tool_choice={"type": "tool", "name": "get_weather"}, max_tokens=64, extra_body=greedy
    ) as stream:
        events = [e.type for e in stream]
        first = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop", events
    assert first.stop_reason == "tool_use", first
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].input.get("city") in CITIES, first.content
    use = uses[0]
    assert use.id.startswith("toolu_"), use.id
    # The tool's answer goes back; the model answers in text.
    history = question + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": '{"temperature_c": 18, "sky": "clear"}'}]},
    ]
    with client.messages.stream(model=model, messages=history, tools=[tool], max_tokens=8, extra_body=greedy) as stream:
        text = "".join(stream.text_stream)
        second = stream.get_final_message()
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use"), second
    assert second.usage.input_tokens > first.usage.input_tokens, (first.usage, second.usage)
    assert text.strip() or any(b.type == "tool_use" for b in second.content), second
    done(f"anthropic streamed tool round trip: ok (tool_use {use.input}, then {text.strip()!r})")


def check_responses(client, model):
    r = client.responses.create(model=model, input="Say hello to Paris.", max_output_tokens=8, temperature=0)
    assert r.status in ("completed", "incomplete"), r
    assert r.output_text.strip(), r
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 8, r.usage
    done(f"openai responses: ok ({r.output_text.strip()!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    oai = openai.OpenAI(base_url=f"{args.base_url}/v1", api_key=args.api_key, max_retries=0, timeout=300)
    ant = anthropic.Anthropic(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=300)
    check_json_schema(oai, args.model)
    check_forced_tool_call(oai, args.model)
    check_messages_tool_round_trip(ant, args.model)
    check_responses(oai, args.model)


if __name__ == "__main__":
    main()
