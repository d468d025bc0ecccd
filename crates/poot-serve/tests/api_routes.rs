//! The Anthropic Messages, Responses and tokenizer routes over raw HTTP on loopback (wgpu
//! backend; lavapipe in CI): what they refuse (each a typed 4xx in the route's own error shape,
//! and the server serves on), Anthropic's exact stream of named events, and /tokenize and
//! /detokenize against the fixture's recorded token ids. The official clients' checks are in
//! openai_client.rs. A machine without a Vulkan adapter reports a skip.

#![allow(clippy::unwrap_used)]

mod common;

use common::{MODEL_ID, Response, Server};
use serde_json::{Value, json};

const KEY: &str = "route-key";

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(common::fixture().join("reference.json")).unwrap())
        .unwrap()
}

fn post(server: &Server, path: &str, body: &Value) -> Response {
    let auth = format!("Authorization: Bearer {KEY}");
    server.request("POST", path, &body.to_string(), &[&auth])
}

/// An Anthropic-shaped 400 whose message says `says`.
fn anthropic_400(r: &Response, says: &str) {
    assert_eq!(r.status, 400, "{}", r.body);
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

/// An OpenAI-shaped 400 naming `param`, whose message says `says`.
fn openai_400(r: &Response, param: &str, says: &str) {
    assert_eq!(r.status, 400, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["param"], param, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

#[test]
fn messages_responses_and_tokenizer_routes() {
    if !common::vulkan_or_skip("api routes") {
        return;
    }
    let server = Server::start(&["--ctx-size", "256", "--parallel", "2", "--api-key", KEY]);
    messages_refusals(&server);
    messages_stream_events(&server);
    responses_refusals(&server);
    tokenize_round_trips(&server);
    tokenizer_refusals(&server);
    keys(&server);
    garbage(&server);
    // After all of that the engine still answers.
    let r = post(
        &server,
        "/v1/messages",
        &json!({"model": MODEL_ID, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["output_tokens"], 2);
}

fn messages_refusals(server: &Server) {
    let user = |content: Value| json!([{"role": "user", "content": content}]);
    let cases = [
        (
            json!({"model": MODEL_ID, "max_tokens": 4,
                   "messages": user(json!([{"type": "hologram", "data": "x"}]))}),
            "unknown content block type `hologram`",
        ),
        (
            json!({"model": MODEL_ID, "messages": user(json!("hi"))}),
            "max_tokens: Field required",
        ),
        (
            json!({"model": MODEL_ID, "max_tokens": 4, "messages": user(json!([
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]))}),
            "`image` are not supported",
        ),
        (
            json!({"model": MODEL_ID, "max_tokens": 4, "messages": user(json!("hi")),
                   "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                   "tool_choice": {"type": "tool", "name": "g"}}),
            "no tool named `g`",
        ),
        (
            json!({"model": MODEL_ID, "max_tokens": 4, "messages": user(json!("hi")),
                   "stop_sequences": ["a", "b", "c", "d", "e"]}),
            "stop_sequences",
        ),
        (
            json!({"model": MODEL_ID, "max_tokens": 4,
                   "messages": [{"role": "system", "content": "x"}]}),
            "unknown role `system`",
        ),
        (
            json!({"model": MODEL_ID, "max_tokens": 100000, "messages": user(json!("hi"))}),
            "maximum context length",
        ),
    ];
    for (body, says) in cases {
        anthropic_400(&post(server, "/v1/messages", &body), says);
    }
    // Not JSON at all: still Anthropic's shape.
    let auth = format!("x-api-key: {KEY}");
    let r = server.request("POST", "/v1/messages", "{\"model\": ", &[&auth]);
    anthropic_400(&r, "not valid JSON");
    let r = post(
        server,
        "/v1/messages",
        &json!({"model": "claude-x", "max_tokens": 4, "messages": user(json!("hi"))}),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    // count_tokens refuses the same blocks.
    let r = post(
        server,
        "/v1/messages/count_tokens",
        &json!({"model": MODEL_ID, "messages": user(json!([{"type": "hologram"}]))}),
    );
    anthropic_400(&r, "hologram");
}

/// The raw stream: each event named, its data's `type` the same name, in Anthropic's order.
fn messages_stream_events(server: &Server) {
    let r = post(
        server,
        "/v1/messages",
        &json!({"model": MODEL_ID, "max_tokens": 3, "stream": true, "temperature": 0,
                "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<&str> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    let data = r.events();
    assert_eq!(names.len(), data.len(), "{}", r.body);
    for (name, d) in names.iter().zip(&data) {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["type"], *name, "{d}");
    }
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(
        names[3..names.len() - 3]
            .iter()
            .all(|n| *n == "content_block_delta")
    );
    let delta: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(delta["usage"]["output_tokens"], 3);
    assert!(!r.body.contains("[DONE]"));
}

fn responses_refusals(server: &Server) {
    let cases = [
        (
            json!({"model": MODEL_ID, "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
            "stores no responses",
        ),
        (
            json!({"model": MODEL_ID, "input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input[0]",
            "stores no responses",
        ),
        (
            json!({"model": MODEL_ID, "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "https://example.com/x.png"}]}]}),
            "input[0].content[0]",
            "`input_image` are not supported",
        ),
        (
            json!({"model": MODEL_ID, "input": "hi", "tool_choice": "required"}),
            "tool_choice",
            "needs `tools`",
        ),
        (
            json!({"model": MODEL_ID, "input": "hi", "max_output_tokens": 0}),
            "max_output_tokens",
            "at least 1",
        ),
        (
            json!({"model": MODEL_ID, "input": "hi",
                   "text": {"format": {"type": "json_schema", "schema": {"type": 12}}}}),
            "text.format",
            "invalid JSON schema",
        ),
    ];
    for (body, param, says) in cases {
        openai_400(&post(server, "/v1/responses", &body), param, says);
    }
}

fn tokenize_round_trips(server: &Server) {
    for case in reference()["greedy"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        // vLLM's spelling adds sequence tokens like the completions route, which recorded these.
        let r = post(server, "/tokenize", &json!({"prompt": prompt}));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["tokens"], case["prompt_ids"], "{prompt:?}");
        assert_eq!(v["count"], case["prompt_ids"].as_array().unwrap().len());
        assert_eq!(v["max_model_len"], 256);
        // llama.cpp's spelling; back through /detokenize, answered in both spellings.
        let r = post(server, "/tokenize", &json!({"content": prompt}));
        let tokens = r.json()["tokens"].clone();
        let r = post(server, "/detokenize", &json!({"tokens": tokens}));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["content"], prompt);
        assert_eq!(v["prompt"], prompt);
    }
    // Pieces, llama.cpp's way.
    let r = post(
        server,
        "/tokenize",
        &json!({"content": "Hello, world!", "with_pieces": true}),
    );
    let pieces: String = r.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["piece"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pieces, "Hello, world!");
    // A chat (vLLM's messages form) counts what /v1/messages/count_tokens counts.
    let messages = json!([{"role": "user", "content": "Say hi."}]);
    let chat = post(server, "/tokenize", &json!({"messages": messages})).json();
    let counted = post(
        server,
        "/v1/messages/count_tokens",
        &json!({"model": MODEL_ID, "messages": messages}),
    )
    .json();
    assert_eq!(chat["count"], counted["input_tokens"], "{chat} {counted}");
}

fn tokenizer_refusals(server: &Server) {
    for bad in [json!([1, 99999]), json!([-1]), json!([4294967296u64])] {
        let r = post(server, "/detokenize", &json!({"tokens": bad}));
        openai_400(&r, "tokens", "not an id in the vocabulary");
    }
    let r = post(server, "/detokenize", &json!({"tokens": ["a"]}));
    assert_eq!(r.status, 400, "{}", r.body);
    for body in [json!({}), json!({"content": "a", "prompt": "b"})] {
        let r = post(server, "/tokenize", &body);
        assert_eq!(r.status, 400, "{}", r.body);
    }
    let r = post(
        server,
        "/tokenize",
        &json!({"model": "other", "content": "a"}),
    );
    assert_eq!(r.status, 404, "{}", r.body);
}

fn keys(server: &Server) {
    let body = json!({"model": MODEL_ID, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
    // Anthropic's header is accepted; a missing key is a 401 in Anthropic's shape.
    let auth = format!("x-api-key: {KEY}");
    let r = server.request("POST", "/v1/messages", &body, &[&auth]);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = server.request("POST", "/v1/messages", &body, &[]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    // The tokenizer routes are behind the key too.
    let r = server.request("POST", "/tokenize", "{\"content\": \"a\"}", &[]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(server.request("GET", "/health", "", &[]).status, 200);
}

/// Shapes no client should send: each a 4xx, none a 5xx or a dropped connection.
fn garbage(server: &Server) {
    let m = MODEL_ID;
    let cases: Vec<(&str, Value)> = vec![
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": null}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [1]}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": [null]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "system": 5}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": "x"}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": 3}]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": "many", "messages": []}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [], "temperature": 9}),
        ),
        (
            "/v1/messages",
            json!({"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 10}}),
        ),
        ("/v1/messages/count_tokens", json!({"model": m})),
        ("/v1/responses", json!({"model": m, "input": {"a": 1}})),
        ("/v1/responses", json!({"model": m, "input": [null]})),
        (
            "/v1/responses",
            json!({"model": m, "input": [{"type": "function_call", "name": "f"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": [{"type": "function_call_output", "call_id": "c", "output": 5}]}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": "x", "tools": [{"type": "function"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": "x", "tools": {}}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": "x", "temperature": -1}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": "x", "conversation": "conv_1"}),
        ),
        (
            "/v1/responses",
            json!({"model": m, "input": "x", "background": true}),
        ),
        ("/v1/responses", json!({"model": m})),
        ("/tokenize", json!({"content": 5})),
        ("/tokenize", json!({"messages": "x"})),
        ("/detokenize", json!({"tokens": "abc"})),
        ("/detokenize", json!({})),
    ];
    for (path, body) in cases {
        let r = post(server, path, &body);
        assert!(
            (400..500).contains(&r.status),
            "{path} {body}: {} {}",
            r.status,
            r.body
        );
        let v = r.json();
        let message = if path.starts_with("/v1/messages") {
            assert_eq!(v["type"], "error", "{path} {body}: {v}");
            &v["error"]["message"]
        } else {
            &v["error"]["message"]
        };
        assert!(
            message.as_str().is_some_and(|s| !s.is_empty()),
            "{path} {body}: {v}"
        );
    }
    assert_eq!(server.request("GET", "/health", "", &[]).status, 200);
}
