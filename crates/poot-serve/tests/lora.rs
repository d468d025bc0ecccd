//! LoRA adapters through the server (wgpu; lavapipe in CI): one adapter named at start with
//! `--lora`, another loaded and unloaded at run time through vLLM's routes, each selected by a
//! request's `model`. Greedy completions equal transformers + peft's tokens (the fixtures'
//! references, `scripts/ref/models/gen_lora_fixtures.py`), compared as the text the server's
//! own /detokenize gives for them; the base model keeps its own tokens.

#![allow(clippy::unwrap_used)]

mod common;

use common::{MODEL_ID, Server, fixture, vulkan_or_skip};
use serde_json::{Value, json};

fn greedy(path: std::path::PathBuf) -> Vec<(Vec<u64>, Vec<u64>)> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = |c: &Value, k: &str| -> Vec<u64> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    v["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(c, "prompt_ids"), ids(c, "ids")))
        .collect()
}

fn adapters() -> std::path::PathBuf {
    fixture().join("../tiny-chat-lora")
}

/// The text of `model`'s greedy completion of `prompt` (token ids), `n` tokens.
fn complete(server: &Server, model: &str, prompt: &[u64], n: usize) -> common::Response {
    let body = json!({
        "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
        "ignore_eos": true,
    });
    server.post("/v1/completions", &body.to_string())
}

fn text_of(server: &Server, ids: &[u64]) -> String {
    let r = server.post("/detokenize", &json!({ "tokens": ids }).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["prompt"].as_str().unwrap().to_owned()
}

fn expect_text(server: &Server, model: &str, case: &(Vec<u64>, Vec<u64>)) {
    let r = complete(server, model, &case.0, case.1.len());
    assert_eq!(r.status, 200, "{model}: {}", r.body);
    let got = r.json()["choices"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(
        got,
        text_of(server, &case.1),
        "{model}: prompt {:?}",
        case.0
    );
}

fn model_ids(server: &Server) -> Vec<String> {
    let r = server.request("GET", "/v1/models", "", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A model to ask, with a prompt and its reference tokens.
type Case<'a> = (&'a str, (Vec<u64>, Vec<u64>));

/// Completions of cases running at once.
struct InFlight<'scope>(Vec<std::thread::ScopedJoinHandle<'scope, String>>);

impl InFlight<'_> {
    /// Each completion's text, in the order of the cases.
    fn join(self) -> Vec<String> {
        self.0.into_iter().map(|h| h.join().unwrap()).collect()
    }
}

fn in_flight<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    server: &'env Server,
    cases: &'env [Case<'env>],
) -> InFlight<'scope> {
    InFlight(
        cases
            .iter()
            .map(|(model, case)| {
                s.spawn(move || {
                    let r = complete(server, model, &case.0, case.1.len());
                    assert_eq!(r.status, 200, "{model}: {}", r.body);
                    r.json()["choices"][0]["text"].as_str().unwrap().to_owned()
                })
            })
            .collect(),
    )
}

#[test]
fn adapters_load_select_and_unload_through_the_server() {
    if !vulkan_or_skip("adapters_load_select_and_unload_through_the_server") {
        return;
    }
    let x_dir = adapters().join("x");
    let lora = format!("x={}", x_dir.display());
    let server = Server::start(&["--lora", &lora, "--max-loras", "2", "--max-lora-rank", "8"]);
    let x = greedy(adapters().join("x/reference.json"));
    let y = greedy(adapters().join("y/reference.json"));
    let base = greedy(fixture().join("reference.json"));
    assert_eq!(model_ids(&server), vec![MODEL_ID, "x"]);
    let card = server.request("GET", "/v1/models/x", "", &[]).json();
    assert_eq!(card["parent"], MODEL_ID, "{card}");
    expect_text(&server, "x", &x[0]);
    let n = x[0].1.len();
    expect_text(
        &server,
        MODEL_ID,
        &(base[0].0.clone(), base[0].1[..n].to_vec()),
    );

    // Loaded at run time, into the compiled tables.
    let y_dir = adapters().join("y");
    let load = |name: &str, path: &std::path::Path| {
        server.post(
            "/v1/load_lora_adapter",
            &json!({"lora_name": name, "lora_path": path}).to_string(),
        )
    };
    let r = load("y", &y_dir);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(model_ids(&server), vec![MODEL_ID, "x", "y"]);
    expect_text(&server, "y", &y[1]);
    expect_text(&server, "x", &x[1]);

    // Refusals: a taken name, no free slot, a directory that is no adapter, an unknown model.
    let r = load("y", &y_dir);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("already loaded"), "{}", r.body);
    let r = load("z", &y_dir);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("slots are taken"), "{}", r.body);
    let r = load("w", &fixture());
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "lora_path", "{}", r.body);
    let r = complete(&server, "z", &x[0].0, 2);
    assert_eq!(r.status, 404, "{}", r.body);

    // Unloaded: no longer served; loaded again, the same tokens.
    let unload = |name: &str| {
        server.post(
            "/v1/unload_lora_adapter",
            &json!({ "lora_name": name }).to_string(),
        )
    };
    let r = unload("y");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(model_ids(&server), vec![MODEL_ID, "x"]);
    assert_eq!(complete(&server, "y", &y[0].0, 2).status, 404);
    assert_eq!(unload("y").status, 404);
    let r = load("y", &y_dir);
    assert_eq!(r.status, 200, "{}", r.body);
    expect_text(&server, "y", &y[0]);
}

/// Three requests in flight at once, each naming its own model (x, y, the base): the engine
/// steps every open sequence together, and each gets transformers + peft's tokens.
#[test]
fn concurrent_requests_with_different_adapters_decode_together() {
    if !vulkan_or_skip("concurrent_requests_with_different_adapters_decode_together") {
        return;
    }
    let (x_dir, y_dir) = (adapters().join("x"), adapters().join("y"));
    let (lx, ly) = (
        format!("x={}", x_dir.display()),
        format!("y={}", y_dir.display()),
    );
    let server = Server::start(&["--lora", &lx, "--lora", &ly, "--max-lora-rank", "8"]);
    let x = greedy(adapters().join("x/reference.json"));
    let y = greedy(adapters().join("y/reference.json"));
    let base = greedy(fixture().join("reference.json"));
    let n = x[0].1.len();
    let cases = [
        ("x", x[0].clone()),
        ("y", y[1].clone()),
        (MODEL_ID, (base[0].0.clone(), base[0].1[..n].to_vec())),
    ];
    let texts = std::thread::scope(|s| in_flight(s, &server, &cases).join());
    for ((model, case), got) in cases.iter().zip(texts) {
        assert_eq!(got, text_of(&server, &case.1), "{model}");
    }
    // The chat route selects the adapter too: its answer is the completion of the rendered
    // prompt with the same adapter, and not the base model's.
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let r = server.post(
        "/tokenize",
        &json!({"model": "x", "messages": messages}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ids: Vec<u64> = r.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let chat = |model: &str| {
        let body = json!({
            "model": model, "messages": messages, "max_tokens": 6, "temperature": 0,
            "ignore_eos": true,
        });
        let r = server.post("/v1/chat/completions", &body.to_string());
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let completion = complete(&server, "x", &ids, 6);
    assert_eq!(completion.status, 200, "{}", completion.body);
    let want = completion.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(chat("x"), want, "chat with x");
    assert_ne!(chat(MODEL_ID), want, "the base model answers otherwise");
}

/// Three adapters and the base in flight at once (z holds x's weights in a third slot, so its
/// tokens are x's), while another adapter is loaded and unloaded under that load: every request
/// completes with its own tokens, and the run-time load and unload succeed.
#[test]
fn three_adapters_and_the_base_decode_together_while_an_adapter_loads() {
    if !vulkan_or_skip("three_adapters_and_the_base_decode_together_while_an_adapter_loads") {
        return;
    }
    let (x_dir, y_dir) = (adapters().join("x"), adapters().join("y"));
    let lora = |name: &str, dir: &std::path::Path| format!("{name}={}", dir.display());
    let (lx, ly, lz) = (lora("x", &x_dir), lora("y", &y_dir), lora("z", &x_dir));
    let server = Server::start(&[
        "--lora",
        &lx,
        "--lora",
        &ly,
        "--lora",
        &lz,
        "--max-loras",
        "4",
        "--max-lora-rank",
        "8",
    ]);
    let x = greedy(adapters().join("x/reference.json"));
    let y = greedy(adapters().join("y/reference.json"));
    let base = greedy(fixture().join("reference.json"));
    let n = x[0].1.len();
    let cases = [
        ("x", x[0].clone()),
        ("y", y[1].clone()),
        ("z", x[1].clone()),
        (MODEL_ID, (base[0].0.clone(), base[0].1[..n].to_vec())),
    ];
    let (texts, hot) = std::thread::scope(|s| {
        let requests = in_flight(s, &server, &cases);
        // Under that load: a fourth adapter in and out through the run-time routes.
        let body = json!({"lora_name": "w", "lora_path": y_dir}).to_string();
        let loaded = server.post("/v1/load_lora_adapter", &body);
        let unloaded = server.post(
            "/v1/unload_lora_adapter",
            &json!({ "lora_name": "w" }).to_string(),
        );
        (requests.join(), [loaded, unloaded])
    });
    for r in &hot {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    for ((model, case), got) in cases.iter().zip(texts) {
        assert_eq!(got, text_of(&server, &case.1), "{model}");
    }
    assert_eq!(model_ids(&server), vec![MODEL_ID, "x", "y", "z"]);
}
