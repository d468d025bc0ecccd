//! Speculative decoding in the server (wgpu backend; lavapipe in CI): with prompt lookup and a
//! draft model (the fixture itself, drafting where lookup finds nothing), greedy completions are
//! transformers' greedy text, a request that sends `"speculative": false` gets the same text
//! without a verification step, and /metrics counts drafted and accepted tokens. A machine
//! without a Vulkan adapter reports a skip.

#![allow(clippy::unwrap_used)]

mod common;

use common::{MODEL_ID, Server};
use serde_json::{Value, json};

#[test]
fn speculative_completions_are_the_greedy_text_and_counted_in_the_metrics() {
    if !common::vulkan_or_skip("speculation") {
        return;
    }
    let fixture = common::fixture();
    let server = Server::start(&[
        "--ctx-size",
        "64",
        "--parallel",
        "2",
        "--spec-ngram",
        "--spec-tokens",
        "3",
        "--draft-model",
        fixture.to_str().unwrap(),
    ]);
    let reference: Value =
        serde_json::from_slice(&std::fs::read(fixture.join("reference.json")).unwrap()).unwrap();
    let case = &reference["greedy"][0];
    let want = case["text"].as_str().unwrap();
    let n = case["ids"].as_array().unwrap().len();
    let complete = |speculative: Option<bool>| {
        let mut body = json!({"model": MODEL_ID, "prompt": case["prompt"], "max_tokens": n,
                              "temperature": 0, "ignore_eos": true});
        if let Some(s) = speculative {
            body["speculative"] = json!(s);
        }
        let r = server.post("/v1/completions", &body.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["choices"][0]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(complete(None), want, "speculating");
    let steps = server.metric("poot_spec_decode_num_verify_steps");
    assert!(steps > 0.0, "{steps} verification steps");
    let drafted = server.metric("poot_spec_decode_num_draft_tokens");
    let accepted = server.metric("poot_spec_decode_num_accepted_tokens");
    // Lookup drafts first and may miss; the draft model (the model itself) never does.
    assert!(
        accepted > 0.0 && accepted <= drafted,
        "{accepted} of {drafted}"
    );
    let rate = server.metric("poot_spec_decode_draft_acceptance_rate");
    assert!((rate - accepted / drafted).abs() < 1e-9, "{rate}");
    assert_eq!(complete(Some(false)), want, "opted out");
    assert_eq!(
        server.metric("poot_spec_decode_num_verify_steps"),
        steps,
        "an opted-out request runs no verification step"
    );
}
