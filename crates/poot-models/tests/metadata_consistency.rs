//! Metadata that disagrees with the tensors fails at load, naming the key and the tensor: a
//! block count over more (or fewer) layers of tensors, a vocabulary size or a token list that
//! matches no embedding, a rotary base or a norm epsilon no formula can use.

#![allow(clippy::unwrap_used)]

#[path = "common/tiny_gguf.rs"]
mod tiny_gguf;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::fixture;
use poot_models::{ModelError, Registry};
use serde_json::Value;
use tiny_gguf::{Meta, TinyGguf};

fn scratch() -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("poot-consistency-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn build(path: &Path) -> Result<(), ModelError> {
    let ck = poot_load::load(path, &LoadOptions::default())?;
    let registry = Registry::builtin()?;
    let entry = registry.resolve(ck.config())?;
    (entry.build)(ck.config(), &ck).map(|_| ())
}

fn build_gguf(g: &TinyGguf) -> Result<(), ModelError> {
    let dir = scratch();
    let path = dir.join("model.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    let out = build(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

/// The llama fixture with `config.json` changed by `edit`.
fn build_hf(edit: impl FnOnce(&mut Value)) -> Result<(), ModelError> {
    let src = fixture("llama").unwrap().path();
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    let dir = scratch();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let out = build(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

#[test]
fn the_unchanged_checkpoints_build() {
    build_gguf(&TinyGguf::llama()).unwrap();
    build_hf(|_| {}).unwrap();
}

#[test]
fn a_block_count_below_the_layer_tensors_is_refused() {
    let mut g = TinyGguf::llama();
    for l in 2..30 {
        g.llama_layer(l);
    }
    match build_gguf(&g) {
        Err(ModelError::LayerCount {
            key,
            declared: 2,
            tensor,
            found: "present",
        }) => {
            assert_eq!(key, "llama.block_count");
            assert_eq!(tensor, "blk.2.attn_norm.weight");
        }
        other => panic!("{other:?}"),
    }
    let err = build_hf(|c| c["num_hidden_layers"] = 1.into()).unwrap_err();
    assert!(
        matches!(&err, ModelError::LayerCount { key, declared: 1, tensor, found: "present" }
            if key == "num_hidden_layers" && tensor == "model.layers.1.input_layernorm.weight"),
        "{err}"
    );
}

#[test]
fn a_block_count_above_the_layer_tensors_is_refused() {
    let mut g = TinyGguf::llama();
    g.set("llama.block_count", Meta::U32(3));
    let err = build_gguf(&g).unwrap_err();
    assert!(
        matches!(&err, ModelError::LayerCount { declared: 3, tensor, found: "missing", .. }
            if tensor == "blk.2.attn_norm.weight"),
        "{err}"
    );
}

#[test]
fn a_vocabulary_size_that_matches_no_tensor_is_refused() {
    let err = build_hf(|c| c["vocab_size"] = 300.into()).unwrap_err();
    assert!(
        matches!(&err, ModelError::VocabSize { key, declared: 300, tensor, rows: 256 }
            if key == "vocab_size" && tensor == "model.embed_tokens.weight"),
        "{err}"
    );
    let mut g = TinyGguf::llama();
    g.set("llama.vocab_size", Meta::U32(17));
    let err = build_gguf(&g).unwrap_err();
    assert!(
        matches!(&err, ModelError::VocabSize { key, declared: 17, rows: 16, .. }
            if key == "llama.vocab_size"),
        "{err}"
    );
}

#[test]
fn a_gguf_token_list_other_than_the_embedding_is_refused() {
    for n in [15, 17] {
        let mut g = TinyGguf::llama();
        g.set(
            "tokenizer.ggml.tokens",
            Meta::Strs((0..n).map(|i| format!("t{i}")).collect()),
        );
        let err = build_gguf(&g).unwrap_err();
        assert!(
            matches!(&err, ModelError::VocabSize { key, tensor, rows: 16, .. }
                if key == "tokenizer.ggml.tokens" && tensor == "token_embd.weight"),
            "{n}: {err}"
        );
    }
}

#[test]
fn rotary_bases_no_formula_can_use_are_refused() {
    for theta in [0.0f32, -10000.0, f32::NAN, f32::INFINITY] {
        let mut g = TinyGguf::llama();
        g.set("llama.rope.freq_base", Meta::F32(theta));
        let err = build_gguf(&g).unwrap_err();
        assert!(
            matches!(&err, ModelError::OutOfRange { key, .. } if key == "llama.rope.freq_base"),
            "{theta}: {err}"
        );
    }
    let err = build_hf(|c| c["rope_theta"] = (-1.0).into()).unwrap_err();
    assert!(
        matches!(&err, ModelError::OutOfRange { key, .. } if key == "rope_theta"),
        "{err}"
    );
}

#[test]
fn norm_epsilons_that_are_nan_or_negative_are_refused() {
    for eps in [f32::NAN, -1e-5, f32::NEG_INFINITY] {
        let mut g = TinyGguf::llama();
        g.set("llama.attention.layer_norm_rms_epsilon", Meta::F32(eps));
        let err = build_gguf(&g).unwrap_err();
        assert!(
            matches!(&err, ModelError::OutOfRange { key, .. }
                if key == "llama.attention.layer_norm_rms_epsilon"),
            "{eps}: {err}"
        );
    }
    let err = build_hf(|c| c["rms_norm_eps"] = (-1e-6).into()).unwrap_err();
    assert!(
        matches!(&err, ModelError::OutOfRange { key, .. } if key == "rms_norm_eps"),
        "{err}"
    );
}
