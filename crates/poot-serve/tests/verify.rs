//! `poot-serve --verify MANIFEST` checks the generation model against a poot integrity manifest:
//! a wrong digest stops the server before any device opens; a matching one serves.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{MODEL_ID, Server};
use serde_json::{Value, json};

/// `checkpoint`'s recorded manifest, and the path in `dir` of a copy whose
/// `model.safetensors` digest is wrong.
fn manifests(checkpoint: &std::path::Path, dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let recorded = poot_llm::handle::Manifest::record(checkpoint)
        .unwrap()
        .to_json();
    let mut tampered: Value = serde_json::from_str(&recorded).unwrap();
    tampered["files"]["model.safetensors"]["sha256"] = Value::from("0".repeat(64));
    let bad = dir.join("bad.json");
    std::fs::write(&bad, tampered.to_string()).unwrap();
    (recorded, bad)
}

#[test]
fn verify_refuses_a_tampered_checkpoint_and_serves_a_matching_one() {
    let dir = std::env::temp_dir().join(format!("poot-serve-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (recorded, bad) = manifests(&common::fixture(), &dir);
    let o = Command::new(env!("CARGO_BIN_EXE_poot-serve"))
        .arg("--model")
        .arg(common::fixture())
        .arg("--verify")
        .arg(&bad)
        .args(["--backend", "wgpu", "--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(!err.contains("backend"), "{err}");

    if !common::vulkan_or_skip("verify") {
        return;
    }
    let good = dir.join("good.json");
    std::fs::write(&good, &recorded).unwrap();
    let server = Server::start(&["--verify", good.to_str().unwrap(), "--ctx-size", "64"]);
    let body = json!({"model": MODEL_ID, "prompt": "a", "max_tokens": 1, "temperature": 0});
    assert_eq!(
        server.post("/v1/completions", &body.to_string()).status,
        200
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--embedding-verify MANIFEST` checks the embedding model the same way: a wrong digest stops
/// the server with the file named, before it serves anything.
#[test]
fn embedding_verify_refuses_a_tampered_encoder() {
    if !common::vulkan_or_skip("embedding verify") {
        return;
    }
    let encoder = common::root().join("crates/poot-models/tests/fixtures/random/bert");
    let dir = std::env::temp_dir().join(format!("poot-serve-everify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, bad) = manifests(&encoder, &dir);
    let o = Command::new(env!("CARGO_BIN_EXE_poot-serve"))
        .arg("--model")
        .arg(common::fixture())
        .arg("--embedding-model")
        .arg(&encoder)
        .arg("--embedding-verify")
        .arg(&bad)
        .args(["--backend", "wgpu", "--port", "0", "--ctx-size", "64"])
        .args(["--prepare-variants", "first-use"])
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("listening"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
