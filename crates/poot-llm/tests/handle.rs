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

/// A copy of the tiny chat fixture with `config.json` and `tokenizer.json` changed.
fn tiny_chat_copy(
    name: &str,
    config: impl FnOnce(&mut serde_json::Value),
    tokenizer: impl FnOnce(&mut serde_json::Value),
) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let dir = std::env::temp_dir().join(format!("poot-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["model.safetensors", "tokenizer_config.json"] {
        std::fs::copy(src.join(file), dir.join(file)).unwrap();
    }
    for (file, edit) in [
        (
            "config.json",
            Box::new(config) as Box<dyn FnOnce(&mut serde_json::Value)>,
        ),
        ("tokenizer.json", Box::new(tokenizer)),
    ] {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(src.join(file)).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(dir.join(file), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    dir
}

#[test]
fn a_tokenizer_with_ids_past_the_embedding_is_refused() {
    // tiny-chat's embedding has 512 rows; one added token (`tokenizers` gives it the next free
    // id, 512) reaches past them.
    let dir = tiny_chat_copy(
        "tokenizer-past-embedding",
        |_| {},
        |t| {
            t["added_tokens"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({
                    "id": 600, "content": "<|extra|>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true
                }))
        },
    );
    let err = ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default())
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            HandleError::TokenizerVocab {
                tokenizer_ids: 513,
                embedding_rows: 512
            }
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_declared_context_is_narrowed_to_the_capacity_in_use() {
    use poot_models::weights::{Role, WeightRole};
    let dir = tiny_chat_copy(
        "huge-context",
        |c| c["max_position_embeddings"] = (1u64 << 24).into(),
        |_| {},
    );
    let registry = Registry::builtin().unwrap();
    let mut h = ModelHandle::load(&dir, &registry, &LoadOptions::default()).unwrap();
    assert_eq!(h.config().max_positions, 1 << 24);
    h.narrow_positions(64).unwrap();
    assert_eq!(h.config().max_positions, 64);
    let cos = h
        .model()
        .weights()
        .get(WeightRole::global(Role::RopeCos(0)))
        .unwrap();
    assert_eq!(cos.ty.dims()[0], 64);
    // Narrowing is one way: a larger capacity than the model now has is refused.
    assert!(matches!(
        h.narrow_positions(65),
        Err(HandleError::Narrow(poot_models::TraceError::Positions {
            capacity: 65,
            max_positions: 64
        }))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[path = "../../poot-models/tests/common/tiny_gguf.rs"]
mod tiny_gguf;

/// The whole handle load (model and text services) of a tiny GGUF Llama whose numeric keys,
/// tokenizer ids included, hold extreme values: a handle or a typed error, never a panic.
#[test]
fn extreme_gguf_values_give_a_handle_or_a_typed_error() {
    use tiny_gguf::{Meta, TinyGguf};
    let registry = Registry::builtin().unwrap();
    let dir = std::env::temp_dir().join(format!("poot-handle-extreme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    std::fs::write(&path, TinyGguf::llama().bytes()).unwrap();
    let mut plain = ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap();
    plain.narrow_positions(16).unwrap();
    let keys: Vec<String> = TinyGguf::llama()
        .meta
        .into_iter()
        .filter(|(_, v)| !matches!(v, Meta::Str(_) | Meta::Strs(_)))
        .map(|(k, _)| k)
        .chain(["tokenizer.ggml.padding_token_id".to_string()])
        .collect();
    let values = [
        Meta::U32(0),
        Meta::U32(u32::MAX),
        Meta::I32(-1),
        Meta::U64(1 << 62),
        Meta::U64(u64::MAX),
        Meta::I64(i64::MIN),
        Meta::F32(f32::NAN),
        Meta::F32(-1.0),
        Meta::F64(1e300),
    ];
    for key in &keys {
        for value in &values {
            let mut g = TinyGguf::llama();
            g.set(key, value.clone());
            std::fs::write(&path, g.bytes()).unwrap();
            if let Ok(mut h) = ModelHandle::load(&path, &registry, &LoadOptions::default()) {
                let capacity = h.config().max_positions.min(16);
                h.narrow_positions(capacity).unwrap();
                let _ = h.text().map(|t| t.encode("t1 t2"));
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A GGUF Llama without a chat template chats in chatml, as llama.cpp does for a model that
/// ships none (its `common_chat_templates_init` default), with the system message kept.
#[test]
fn a_gguf_llama_without_a_template_chats_in_chatml() {
    use tiny_gguf::TinyGguf;
    let dir = std::env::temp_dir().join(format!("poot-handle-chatml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    std::fs::write(&path, TinyGguf::llama().bytes()).unwrap();
    let h = ModelHandle::load(
        &path,
        &Registry::builtin().unwrap(),
        &LoadOptions::default(),
    )
    .unwrap();
    let messages = serde_json::json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"}
    ]);
    let rendered = h
        .text()
        .unwrap()
        .render_chat_value(&messages, None)
        .unwrap();
    assert_eq!(
        rendered.text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
