//! `poot-serve --model org/name` against the fake Hub on the loopback interface: the repository
//! is fetched into the Hub's cache, checked against the manifest it carries, served under its
//! repository id, and answers as the local copy does; a missing repository or quantization
//! stops the server with the problem named, before any device opens.

#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

use common::Server;
use poot_hub::fake::{FakeHub, FakeRepo};
use serde_json::json;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-serve-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn completion(server: &Server, model: &str) -> serde_json::Value {
    let body = json!({"model": model, "prompt": "hello there", "max_tokens": 4, "temperature": 0});
    let r = server.post("/v1/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[test]
fn a_hub_repository_is_served_under_its_id_and_answers_as_its_local_copy() {
    if !common::vulkan_or_skip("hub") {
        return;
    }
    let manifest = poot_llm::handle::Manifest::record(&common::fixture())
        .unwrap()
        .to_json();
    let repo = FakeRepo::from_dir(&common::fixture())
        .unwrap()
        .file(poot_hub::MANIFEST_FILE, manifest);
    let hub = FakeHub::start(vec![("org/tiny-chat", repo)], None).unwrap();
    let cache = temp_dir("serve");
    let endpoint = hub.endpoint();
    let env: Vec<(&str, &OsStr)> = vec![
        ("HF_ENDPOINT", OsStr::new(&endpoint)),
        ("HF_HOME", cache.as_os_str()),
    ];
    let want = {
        let local = Server::start(&["--ctx-size", "64"]);
        completion(&local, common::MODEL_ID)
    };
    let server = Server::start_model(OsStr::new("org/tiny-chat"), &["--ctx-size", "64"], &env);
    let models = server.request("GET", "/v1/models", "", &[]).json();
    assert_eq!(models["data"][0]["id"], "org/tiny-chat", "{models}");
    let got = completion(&server, "org/tiny-chat");
    assert_eq!(got["choices"][0]["text"], want["choices"][0]["text"]);
    assert!(cache.join("hub/models--org--tiny-chat/refs/main").is_file());
    assert!(
        hub.requests()
            .iter()
            .any(|r| r.contains("poot-manifest.json"))
    );
    drop(server);
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_missing_repository_or_quantization_stops_the_server_naming_it() {
    let hub = FakeHub::start(
        vec![(
            "org/tiny-chat",
            FakeRepo::from_dir(&common::fixture()).unwrap(),
        )],
        None,
    )
    .unwrap();
    let cache = temp_dir("refusals");
    for (model, says) in [
        ("org/nothing", "repository `org/nothing` not found"),
        ("org/tiny-chat:Q4_K_M", "no GGUF of quantization `Q4_K_M`"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_poot-serve"))
            .args(["--model", model, "--backend", "wgpu", "--port", "0"])
            .env("HF_ENDPOINT", hub.endpoint())
            .env("HF_HOME", &cache)
            .env_remove("HF_TOKEN")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains(says) && err.contains("--model"), "{err}");
        assert!(!err.contains("backend"), "{err}");
    }
    std::fs::remove_dir_all(&cache).unwrap();
}
