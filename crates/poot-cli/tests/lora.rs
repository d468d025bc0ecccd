//! `poot run --lora`: the tiny chat model with a random PEFT adapter on the CPU backend
//! generates transformers + peft's greedy tokens (the fixture's reference,
//! `scripts/ref/models/gen_lora_fixtures.py`); an adapter that does not fit is one error line.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures")
}

fn poot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
        .unwrap()
}

fn cpu_or_skip() -> bool {
    match poot_llm::open_executor(poot_llm::BackendChoice::Cpu) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: no CPU backend: {e}");
            false
        }
    }
}

#[test]
fn run_with_an_adapter_generates_the_peft_tokens() {
    if !cpu_or_skip() {
        return;
    }
    let reference: Json = serde_json::from_slice(
        &std::fs::read(fixtures().join("tiny-chat-lora/x/reference.json")).unwrap(),
    )
    .unwrap();
    let case = &reference["greedy"][0];
    let model = fixtures().join("tiny-chat");
    let adapter = fixtures().join("tiny-chat-lora/x");
    // "Hello, world!" is the case's prompt (the fixture's tokenizer adds no special tokens).
    let o = poot(&[
        "run",
        model.to_str().unwrap(),
        "Hello, world!",
        "--lora",
        adapter.to_str().unwrap(),
        "--backend",
        "cpu",
        "--max-new",
        "8",
        "--ignore-eos",
        "--json",
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    let summary: Json = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(summary["prompt_ids"], case["prompt_ids"], "{summary}");
    assert_eq!(summary["tokens"], case["ids"], "{summary}");
}

#[test]
fn an_adapter_for_another_model_is_one_error_line() {
    // The GPTQ fixture's adapter is for hidden 128; the chat model's hidden size is 64.
    let adapter = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-models/tests/fixtures/lora/gptq/adapter");
    let model = fixtures().join("tiny-chat");
    for (lora, says) in [
        (adapter.to_str().unwrap(), "shape"),
        ("/nonexistent/adapter", "cannot read"),
    ] {
        let o = poot(&[
            "run",
            model.to_str().unwrap(),
            "hi",
            "--lora",
            lora,
            "--backend",
            "cpu",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{err}");
        assert!(errors[0].contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
