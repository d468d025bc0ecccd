//! The official `openai` and `anthropic` Python clients against poot-serve on a real
//! checkpoint, SmolLM2-135M-Instruct Q4_1 (fetched by scripts/fetch-models.sh), on the CPU
//! backend: a JSON-schema answer that validates, a forced tool call that parses, a streamed
//! Messages conversation with a tool round trip, and a Responses call
//! (tests/smollm2_clients.py). The tiny fixture's client checks are tests/openai_client.rs.
//!
//! Skips without the checkpoint, without a C compiler for the CPU backend, or without a Python
//! that imports both clients.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{Server, cache, imports, python};

const API_KEY: &str = "test-key";
const MODEL: &str = "smollm2";

#[test]
fn the_clients_drive_smollm2() {
    let checkpoint = cache().join("models/smollm2-135m-instruct-q4_1.gguf");
    if !checkpoint.exists() {
        eprintln!(
            "SKIP: {} is absent (scripts/fetch-models.sh)",
            checkpoint.display()
        );
        return;
    }
    let compiler = Command::new(std::env::var("CC").unwrap_or("cc".into()))
        .arg("--version")
        .output();
    if !compiler.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIP: no C compiler for the CPU backend");
        return;
    }
    let py = match python() {
        Ok(py) if imports(&py, "anthropic") => py,
        Ok(py) => {
            eprintln!("SKIP: {py} does not import anthropic (scripts/pyenv.sh client)");
            return;
        }
        Err(why) => {
            eprintln!("SKIP: {why}");
            return;
        }
    };
    let server = Server::start_on(
        "cpu",
        checkpoint.as_os_str(),
        &[
            "--served-model-name",
            MODEL,
            "--api-key",
            API_KEY,
            "--parallel",
            "1",
            "--ctx-size",
            "512",
        ],
        &[],
    );
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/smollm2_clients.py"))
        .args(["--base-url", &server.url()])
        .args(["--api-key", API_KEY, "--model", MODEL])
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the client checks on SmolLM2 failed");
}
