//! POST /v1/rerank and /v1/score with `--rerank-model` on the tiny reranker (lavapipe): the
//! scores of sentence-transformers' CrossEncoder within 1e-5 (f32 on both sides; the fixture's
//! reference), documents in its ranking order, the aliases vLLM and llama.cpp serve, and every
//! refusal a 4xx naming its field while the server keeps serving.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Server;
use serde_json::{Value, json};

fn reranker() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-reranker")
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(reranker().join("reference.json")).unwrap())
        .unwrap()
}

fn close(got: &Value, want: &Value) -> bool {
    (got.as_f64().unwrap() - want.as_f64().unwrap()).abs() <= 1e-5
}

fn start() -> Option<Server> {
    if !common::vulkan_or_skip("rerank") {
        return None;
    }
    Some(Server::start(&[
        "--ctx-size",
        "64",
        "--rerank-model",
        reranker().to_str().unwrap(),
        "--rerank-batch",
        "4",
    ]))
}

#[test]
fn rerank_and_score_answer_as_sentence_transformers_cross_encoder() {
    let Some(server) = start() else { return };
    let reference = reference();
    for case in reference["cases"].as_array().unwrap() {
        let body = json!({"model": "tiny-reranker", "query": case["query"], "documents": case["documents"]});
        let r = server.post("/v1/rerank", &body.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["model"], "tiny-reranker");
        let results = v["results"].as_array().unwrap();
        let order: Vec<u64> = results
            .iter()
            .map(|x| x["index"].as_u64().unwrap())
            .collect();
        let want: Vec<u64> = case["ranking"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(order, want, "{v}");
        for x in results {
            let i = x["index"].as_u64().unwrap() as usize;
            assert!(
                close(&x["relevance_score"], &case["scores"][i]),
                "{x} vs {}",
                case["scores"][i]
            );
            assert_eq!(x["document"]["text"], case["documents"][i]);
        }
        let tokens: usize = case["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ids| ids.as_array().unwrap().len())
            .sum();
        assert_eq!(v["usage"]["total_tokens"], tokens);

        // /v1/score: one text_1 against every text_2, scores in the documents' order.
        let body = json!({"text_1": case["query"], "text_2": case["documents"]});
        let r = server.post("/v1/score", &body.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), case["documents"].as_array().unwrap().len());
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["index"], i);
            assert_eq!(d["object"], "score");
            assert!(close(&d["score"], &case["scores"][i]), "{d}");
        }
    }
    // Lists of one length pair in order; top_n, return_documents, document objects and the
    // aliases.
    let case = &reference["cases"][0];
    let docs = case["documents"].as_array().unwrap();
    let body = json!({"text_1": [case["query"], case["query"]], "text_2": [docs[3], docs[0]]});
    let v = server.post("/score", &body.to_string()).json();
    assert!(close(&v["data"][0]["score"], &case["scores"][3]), "{v}");
    assert!(close(&v["data"][1]["score"], &case["scores"][0]), "{v}");
    let objects: Vec<Value> = docs.iter().map(|d| json!({"text": d})).collect();
    for route in ["/rerank", "/v2/rerank"] {
        let body = json!({"query": case["query"], "documents": objects, "top_n": 2, "return_documents": false});
        let r = server.post(route, &body.to_string());
        assert_eq!(r.status, 200, "{route}: {}", r.body);
        let results = r.json()["results"].as_array().unwrap().clone();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["index"], case["ranking"][0]);
        assert!(results[0].get("document").is_none(), "{results:?}");
    }
    let models = server.request("GET", "/v1/models", "", &[]).json();
    assert!(
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "tiny-reranker"),
        "{models}"
    );
}

#[test]
fn bad_rerank_requests_get_a_4xx_naming_the_problem_and_the_server_keeps_serving() {
    let Some(server) = start() else { return };
    let check = |route: &str, body: Value, status: u16, param: Option<&str>, says: &str| {
        let r = server.post(route, &body.to_string());
        assert_eq!(r.status, status, "{route} {body}: {}", r.body);
        let e = r.json();
        assert_eq!(e["error"]["param"].as_str(), param, "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(says),
            "{e}"
        );
    };
    check(
        "/v1/rerank",
        json!({"query": "cats", "documents": []}),
        400,
        Some("documents"),
        "1 to",
    );
    check(
        "/v1/rerank",
        json!({"query": "", "documents": ["cats"]}),
        400,
        Some("query"),
        "empty",
    );
    let long = "cats ".repeat(70);
    check(
        "/v1/rerank",
        json!({"query": long, "documents": ["cats"]}),
        400,
        Some("query"),
        "at most",
    );
    check(
        "/v1/rerank",
        json!({"model": "nope", "query": "a", "documents": ["b"]}),
        404,
        Some("model"),
        "nope",
    );
    check(
        "/v1/rerank",
        json!({"model": common::MODEL_ID, "query": "a", "documents": ["b"]}),
        400,
        Some("model"),
        "not a cross-encoder",
    );
    check("/v1/rerank", json!({"query": "a"}), 400, None, "documents");
    check(
        "/v1/score",
        json!({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}),
        400,
        Some("text_2"),
        "same length",
    );
    check(
        "/v1/score",
        json!({"text_1": [], "text_2": ["c"]}),
        400,
        Some("text_1"),
        "empty",
    );
    assert_eq!(server.request("GET", "/health", "", &[]).status, 200);
    let r = server.post(
        "/v1/rerank",
        &json!({"query": "cats", "documents": ["cats eat fish"]}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_server_without_a_cross_encoder_refuses_rerank_and_one_that_is_not_one_does_not_start() {
    if !common::vulkan_or_skip("rerank") {
        return;
    }
    let embedding =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures/random/bert");
    let o = Command::new(env!("CARGO_BIN_EXE_poot-serve"))
        .arg("--model")
        .arg(common::fixture())
        .args([
            "--backend",
            "wgpu",
            "--port",
            "0",
            "--ctx-size",
            "64",
            "--prepare-variants",
            "first-use",
        ])
        .arg("--rerank-model")
        .arg(&embedding)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--rerank-model") || err.contains("rerank model"),
        "{err}"
    );
    assert!(err.contains("not a cross-encoder"), "{err}");
    let server = Server::start(&["--ctx-size", "64"]);
    let r = server.post(
        "/v1/rerank",
        &json!({"query": "a", "documents": ["b"]}).to_string(),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("--rerank-model"), "{}", r.body);
}
