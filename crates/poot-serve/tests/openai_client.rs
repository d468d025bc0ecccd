//! The official `openai` Python client against the server over loopback (wgpu backend;
//! lavapipe in CI): completions, chat (with tools), streaming with usage, stop strings, seeded
//! sampling, a JSON-schema answer, the Responses API, models, embeddings (with
//! all-MiniLM-L6-v2 when scripts/fetch-models.sh fetched it), reranking and scores (the tiny
//! reranker) and the error cases (see tests/openai_client.py); then
//! the official `anthropic` client against the same server's Messages API
//! (tests/anthropic_client.py).
//!
//! The Python interpreter is $POOT_PYTHON, else the reference venv ($POOT_CACHE/venv, made by
//! scripts/pyenv.sh), else `python3`. Without a Vulkan adapter, or without the `openai` package,
//! the test reports a skip; without the `anthropic` package, the Anthropic checks do.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{MODEL_ID, Server, cache, imports, python};

const CONTEXT: &str = "512";
const API_KEY: &str = "test-key";

#[test]
fn the_openai_client_is_served() {
    if !common::vulkan_or_skip("openai client") {
        return;
    }
    let py = match python() {
        Ok(py) => py,
        Err(why) => {
            eprintln!("SKIP openai client: {why}");
            return;
        }
    };
    let minilm = cache().join("models/all-minilm-l6-v2");
    let mut flags = vec![
        "--ctx-size",
        CONTEXT,
        "--parallel",
        "2",
        "--api-key",
        API_KEY,
    ];
    let minilm_arg = minilm.display().to_string();
    let embeddings = minilm.join("model.safetensors").exists();
    if embeddings {
        flags.extend([
            "--embedding-model",
            &minilm_arg,
            "--embedding-model-name",
            "minilm",
            "--embedding-batch",
            "2",
            "--embedding-max-tokens",
            "16",
        ]);
    } else {
        eprintln!(
            "SKIP embeddings: {} is absent (scripts/fetch-models.sh minilm)",
            minilm.display()
        );
    }
    let reranker = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-reranker");
    let reranker_arg = reranker.display().to_string();
    flags.extend([
        "--rerank-model",
        &reranker_arg,
        "--rerank-model-name",
        "tiny-reranker",
        "--rerank-batch",
        "4",
    ]);
    let server = Server::start(&flags);
    let mut cmd = Command::new(&py);
    cmd.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py"))
        .args(["--base-url", &format!("{}/v1", server.url())])
        .args([
            "--api-key",
            API_KEY,
            "--model",
            MODEL_ID,
            "--context",
            CONTEXT,
        ])
        .arg("--reference")
        .arg(common::fixture().join("reference.json"))
        .args(["--rerank-model", "tiny-reranker"])
        .arg("--rerank-reference")
        .arg(reranker.join("reference.json"));
    if embeddings {
        cmd.args(["--embedding-model", "minilm"])
            .arg("--minilm-reference")
            .arg(common::root().join("crates/poot-models/tests/fixtures/real/minilm.json"));
    }
    let out = cmd.output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the openai client checks failed");
    if !imports(&py, "anthropic") {
        eprintln!(
            "SKIP anthropic client: {py} does not import anthropic (scripts/pyenv.sh client)"
        );
        return;
    }
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/anthropic_client.py"))
        .args(["--base-url", &server.url()])
        .args(["--api-key", API_KEY, "--model", MODEL_ID])
        .arg("--reference")
        .arg(common::fixture().join("reference.json"))
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the anthropic client checks failed");
}
