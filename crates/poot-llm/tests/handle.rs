//! Loading checkpoints into handles: real checkpoints get their family and their text services;
//! an unregistered family is refused before any weight file is opened.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::models::cached_model;
use poot_llm::{HandleError, LoadOptions, ModelHandle};
use poot_models::{ModelError, Registry};

#[test]
fn an_unregistered_family_is_refused_before_any_weight_file_is_opened() {
    let dir = std::env::temp_dir().join(format!("poot-unregistered-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        br#"{"model_type": "not_a_family", "hidden_size": 8}"#,
    )
    .unwrap();
    // A weight file that cannot be opened at all: opening it would be an I/O error, not this one.
    let weights = dir.join("model.safetensors");
    let _ = std::fs::remove_file(&weights);
    std::os::unix::fs::symlink(Path::new("/nonexistent/poot/weights"), &weights).unwrap();
    let err = ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default())
        .err()
        .unwrap();
    match err {
        HandleError::Unsupported(ModelError::Unregistered { key, .. }) => {
            assert_eq!(key, "not_a_family")
        }
        other => panic!("{other}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn real_checkpoints_load_with_their_text_services() {
    let registry = Registry::builtin().unwrap();
    if let Some(p) = cached_model("smollm2-135m-instruct-q4_1.gguf") {
        let h = ModelHandle::load(&p, &registry, &LoadOptions::default()).unwrap();
        assert_eq!(h.config().family, "llama");
        let ids = h
            .text()
            .unwrap()
            .encode("The capital of France is")
            .unwrap();
        assert_eq!(ids, vec![504, 3575, 282, 4649, 314]);
    }
    if let Some(p) = cached_model("gemma3-270m-q4_k_m.gguf") {
        let h = ModelHandle::load(&p, &registry, &LoadOptions::default()).unwrap();
        assert_eq!(h.config().family, "gemma3");
        assert_eq!(h.config().vocab_size, 262144);
    }
    if let Some(p) = cached_model("all-minilm-l6-v2") {
        let h = ModelHandle::load(&p, &registry, &LoadOptions::default()).unwrap();
        assert_eq!(h.config().family, "bert");
        assert!(h.text().is_ok());
    }
}
