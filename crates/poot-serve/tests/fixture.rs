//! The tiny chat fixture the server tests run on: poot loads it as a Llama and builds its
//! tokenizer and chat template, which agree with the Python references the generator recorded
//! (`tokenizers` ids, transformers' apply_chat_template text).

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use poot_llm::{LoadOptions, ModelHandle};
use poot_models::Registry;
use poot_text::EncodeOptions;
use serde_json::Value;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat")
}

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture().join("reference.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn loads_as_a_llama_with_its_text_services() {
    let handle = ModelHandle::load(
        &fixture(),
        &Registry::builtin().unwrap(),
        &LoadOptions::default(),
    )
    .unwrap();
    let config = handle.config();
    assert_eq!(config.family, "llama");
    assert_eq!(config.vocab_size, 512);
    assert_eq!(config.n_layers, 2);
    assert_eq!(config.max_positions, 512);
    let text = handle.text().unwrap();
    let reference = reference();
    // The completions endpoint parses spelled control tokens, as `tokenizers` does.
    let raw = EncodeOptions {
        add_special: true,
        parse_special: true,
    };
    for case in reference["encode"].as_array().unwrap() {
        let s = case["text"].as_str().unwrap();
        let got = text.tokenizer().encode(s, raw).unwrap();
        assert_eq!(got, ids(&case["ids"]), "encode {s:?}");
    }
    for case in reference["greedy"].as_array().unwrap() {
        let out = ids(&case["ids"]);
        assert_eq!(
            text.decode(&out).unwrap(),
            case["text"].as_str().unwrap(),
            "decode of {out:?}"
        );
    }
    let chat = &reference["chat"];
    let rendered = text
        .render_chat_value(&chat["messages"], Some(&chat["tools"]))
        .unwrap();
    assert_eq!(rendered.text, chat["text"].as_str().unwrap());
    assert!(rendered.stops.iter().any(|s| s == "<|im_end|>"));
    // The user typed `<|im_end|>`: it stays text, so the prompt holds one fewer control token
    // than the plain encoding of the rendered text.
    let im_end = text.tokenizer().token_id("<|im_end|>").unwrap();
    assert_eq!(rendered.stop_ids, vec![im_end]);
    let count = |v: &[u32]| v.iter().filter(|&&t| t == im_end).count();
    let chat_ids = text.encode_chat(&rendered).unwrap();
    let plain = text.tokenizer().encode(&rendered.text, raw).unwrap();
    assert_eq!(count(&chat_ids) + 1, count(&plain));
}
