//! Guided decoding over HTTP on the tiny chat fixture (random weights, wgpu backend; lavapipe in
//! CI): `response_format` (`json_schema`, `json_object`), vLLM's `guided_regex`,
//! `guided_grammar`, `guided_choice` and `guided_json` on both generation routes, forced tool
//! calls (`tool_choice` `required` and named on chat and Responses, Anthropic's `any` and
//! `tool`) coming back as parsed calls, Responses `text.format`; each output checked against
//! its constraint. Invalid schemas, regexes and grammars are 400s naming the field with
//! llguidance's message, and the server serves on. A machine without a Vulkan adapter reports
//! a skip.

#![allow(clippy::unwrap_used)]

mod common;

use common::{MODEL_ID, Server};
use serde_json::{Value, json};

fn chat(server: &Server, extra: Value) -> Value {
    let mut body = json!({
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": "Answer as asked."}],
        // Room for the JSON whitespace a random model likes (at most 20 between two tokens).
        "max_tokens": 250,
        "temperature": 0.7,
        "seed": 5,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = server.post("/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

/// The output of a schema-constrained answer, which the grammar ended.
fn json_answer(v: &Value) -> Value {
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    serde_json::from_str(content(v)).unwrap_or_else(|e| panic!("{e}: {v}"))
}

fn code(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 6
        && b[..3].iter().all(u8::is_ascii_digit)
        && b[3] == b'-'
        && b[4..].iter().all(u8::is_ascii_lowercase)
}

const SCHEMA: &str = r#"{
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9}
    },
    "required": ["color", "count"],
    "additionalProperties": false
}"#;

fn satisfies(v: &Value) -> bool {
    let o = v.as_object().unwrap();
    o.len() == 2
        && ["red", "green", "blue"].contains(&o["color"].as_str().unwrap_or(""))
        && o["count"].as_i64().is_some_and(|c| (1..=9).contains(&c))
}

fn weather_tool(city: Value) -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": city}, "required": ["city"]}}})
}

#[test]
fn guided_fields_constrain_every_route() {
    if !common::vulkan_or_skip("guided decoding") {
        return;
    }
    let server = Server::start(&["--ctx-size", "512", "--parallel", "2"]);
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();

    // response_format json_schema, strict.
    for seed in 0..3 {
        let v = chat(
            &server,
            json!({"seed": seed, "response_format": {"type": "json_schema",
                "json_schema": {"name": "pick", "schema": schema, "strict": true}}}),
        );
        let out = json_answer(&v);
        assert!(satisfies(&out), "{out}");
    }
    // vLLM's guided_json as an object and as text, on chat and completions.
    let v = chat(&server, json!({"guided_json": schema}));
    assert!(satisfies(&json_answer(&v)));
    let r = server.post(
        "/v1/completions",
        &json!({"model": MODEL_ID, "prompt": "Pick:", "max_tokens": 250, "guided_json": SCHEMA,
                "temperature": 0})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let out: Value = serde_json::from_str(v["choices"][0]["text"].as_str().unwrap()).unwrap();
    assert!(satisfies(&out), "{out}");

    // Regex, choice and grammar.
    let v = chat(
        &server,
        json!({"guided_regex": "[0-9]{3}-[a-z]{2}", "n": 2}),
    );
    for c in v["choices"].as_array().unwrap() {
        let text = c["message"]["content"].as_str().unwrap();
        assert!(code(text), "{text:?}");
    }
    let v = chat(&server, json!({"guided_choice": ["alpha", "beta gamma"]}));
    assert!(["alpha", "beta gamma"].contains(&content(&v)), "{v}");
    let v = chat(
        &server,
        json!({"guided_grammar": "start: (\"ab\" | \"cd\")+ \".\"\n", "max_tokens": 40}),
    );
    let text = content(&v);
    if v["choices"][0]["finish_reason"] == "stop" {
        let body = text.strip_suffix('.').unwrap();
        assert!(!body.is_empty() && body.len().is_multiple_of(2), "{text:?}");
        assert!(
            body.as_bytes().chunks(2).all(|p| p == b"ab" || p == b"cd"),
            "{text:?}"
        );
    }

    // json_object: whatever the model writes starts an object and, when the grammar ended it,
    // parses as one.
    let v = chat(&server, json!({"response_format": {"type": "json_object"}}));
    if v["choices"][0]["finish_reason"] == "stop" {
        assert!(json_answer(&v).is_object());
    } else {
        assert!(content(&v).trim_start().starts_with('{'), "{v}");
    }

    // Streaming: the deltas concatenate to a constrained answer.
    let r = server.post(
        "/v1/chat/completions",
        &json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 40, "stream": true, "guided_regex": "[0-9]{3}-[a-z]{2}"})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let text: String = r
        .events()
        .iter()
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| {
            let v: Value = serde_json::from_str(d).ok()?;
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(code(&text), "{text:?}");

    forced_tool_calls(&server);
    responses_and_messages(&server);
    refusals(&server);
    // Masks were computed and timed.
    assert!(server.metric("poot_guided_masks_total") > 0.0);
}

fn forced_tool_calls(server: &Server) {
    let city = json!({"enum": ["Paris", "Rome"]});
    let other = json!({"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                       "required": ["zone"]}}});
    // required: calls to any tool, one without parallel calls, else one or more (a random
    // model may go on calling until max_tokens; the finished calls still parse).
    let tools = json!([weather_tool(city.clone()), other]);
    let one = chat(
        server,
        json!({"tools": tools, "tool_choice": "required", "parallel_tool_calls": false,
               "max_tokens": 150}),
    );
    assert_eq!(one["choices"][0]["finish_reason"], "tool_calls", "{one}");
    assert_eq!(
        one["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let several = chat(
        server,
        json!({"tools": tools, "tool_choice": "required", "max_tokens": 150}),
    );
    let mut calls = Vec::new();
    for v in [&one, &several] {
        calls.extend(
            v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .unwrap()
                .clone(),
        );
    }
    assert!(calls.len() >= 2, "{several}");
    for call in &calls {
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        match call["function"]["name"].as_str().unwrap() {
            "get_weather" => assert!(["Paris", "Rome"].contains(&args["city"].as_str().unwrap())),
            "get_time" => assert!(["UTC", "CET"].contains(&args["zone"].as_str().unwrap())),
            other => panic!("call to {other}"),
        }
    }
    // Named: exactly that tool.
    let v = chat(
        server,
        json!({"tools": [weather_tool(city.clone())], "max_tokens": 100,
               "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    );
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
}

fn responses_and_messages(server: &Server) {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let r = server.post(
        "/v1/responses",
        &json!({"model": MODEL_ID, "input": "Pick.", "max_output_tokens": 250,
                "text": {"format": {"type": "json_schema", "name": "pick", "schema": schema,
                                     "strict": true}}})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let text = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap())
        .filter_map(|c| c["text"].as_str())
        .collect::<String>();
    assert!(satisfies(&serde_json::from_str(&text).unwrap()), "{v}");

    let r = server.post(
        "/v1/responses",
        &json!({"model": MODEL_ID, "input": "Weather?", "max_output_tokens": 100,
                "tools": [{"type": "function", "name": "get_weather", "parameters":
                    {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                     "required": ["city"]}}],
                "tool_choice": "required", "parallel_tool_calls": false})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(
        v["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["type"] == "function_call" && i["name"] == "get_weather"),
        "{v}"
    );

    for choice in [
        json!({"type": "any", "disable_parallel_tool_use": true}),
        json!({"type": "tool", "name": "get_weather"}),
    ] {
        let r = server.post(
            "/v1/messages",
            &json!({"model": MODEL_ID, "max_tokens": 100,
                    "messages": [{"role": "user", "content": "Weather?"}],
                    "tools": [{"name": "get_weather", "input_schema": {"type": "object",
                        "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}],
                    "tool_choice": choice})
            .to_string(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["stop_reason"], "tool_use", "{v}");
        let block = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap();
        assert_eq!(block["name"], "get_weather");
        assert!(["Paris", "Rome"].contains(&block["input"]["city"].as_str().unwrap()));
    }
}

/// A 400 naming `param` whose message says `says`.
fn refused(server: &Server, path: &str, body: Value, param: &str, says: &str) {
    let r = server.post(path, &body.to_string());
    assert_eq!(r.status, 400, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["param"], param, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

fn refusals(server: &Server) {
    let m = |extra: Value| {
        let mut b = json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "x"}],
                           "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let path = "/v1/chat/completions";
    refused(
        server,
        path,
        m(json!({"guided_regex": "([0-9]"})),
        "guided_regex",
        "invalid regex",
    );
    refused(
        server,
        path,
        m(json!({"guided_grammar": "start: nothing_here"})),
        "guided_grammar",
        "invalid Lark grammar",
    );
    refused(
        server,
        path,
        m(json!({"response_format": {"type": "json_schema",
                 "json_schema": {"name": "x", "schema": {"type": 12}}}})),
        "response_format",
        "invalid JSON schema",
    );
    refused(
        server,
        path,
        m(json!({"response_format": {"type": "yaml"}})),
        "response_format",
        "unknown type",
    );
    refused(
        server,
        path,
        m(json!({"guided_regex": "a", "guided_choice": ["b"]})),
        "guided_choice",
        "at most one",
    );
    refused(
        server,
        path,
        m(json!({"guided_regex": "a", "response_format": {"type": "json_object"}})),
        "guided_regex",
        "both constrain",
    );
    refused(
        server,
        path,
        m(json!({"tools": [weather_tool(json!({"type": "string"}))],
                 "tool_choice": {"type": "function", "function": {"name": "nope"}}})),
        "tool_choice",
        "no tool named `nope`",
    );
    refused(
        server,
        path,
        m(json!({"tool_choice": "required"})),
        "tool_choice",
        "needs `tools`",
    );
    refused(
        server,
        "/v1/responses",
        json!({"model": MODEL_ID, "input": "hi",
               "text": {"format": {"type": "json_schema", "schema": {"type": 12}}}}),
        "text.format",
        "invalid JSON schema",
    );
    // The server serves on.
    let v = chat(server, json!({"guided_regex": "ok"}));
    assert_eq!(content(&v), "ok");
}
