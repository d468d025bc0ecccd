//! The built-in formats a family falls back to for a GGUF without a chat template render what
//! llama.cpp's built-ins do. Expected strings: llama.cpp `tests/test-chat-template.cpp`
//! (the `google/gemma-7b-it` row of its standard conversation) and, for the other cases,
//! written from `src/llama-chat.cpp`'s `LLM_CHAT_TEMPLATE_GEMMA` and `LLM_CHAT_TEMPLATE_CHATML`
//! branches (ggml-org/llama.cpp at 0192c129): gemma merges trimmed system texts into the first
//! user turn after them, trims every message, names the assistant `model`; chatml prints each
//! message as it is. Token for token: llama.cpp tokenizes the rendered text with BOS added and
//! control tokens parsed, which `encode_chat` reproduces (checked on the cached Gemma 3). And
//! run: llama-cpp-python 0.3.36's renders of more conversations with the same built-ins
//! (`tests/fixtures/llama_cpp_fallbacks.json`).

mod support;

use poot_text::{EncodeOptions, HfTextFiles, TextServices};
use serde_json::{Value as Json, json};
use support::*;

/// Services whose only template is the built-in `format` (the toy tokenizer ships none).
fn with_fallback(format: &str) -> TextServices {
    let tokenizer_json =
        std::fs::read(fixture_path("toy_bytelevel_tokenizer.json")).expect("fixture");
    TextServices::from_hf(
        &HfTextFiles {
            tokenizer_json: &tokenizer_json,
            tokenizer_config_json: None,
            chat_template_jinja: None,
        },
        Some(format),
    )
    .expect("services build")
}

/// llama.cpp's test conversation (`tests/test-chat-template.cpp`).
fn standard_conversation() -> Json {
    json!([
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ])
}

#[test]
fn gemma_fallback_renders_llama_cpps_gemma() {
    let s = with_fallback("gemma");
    let render = |messages: Json| s.render_chat_value(&messages, None).expect("renders").text;
    assert_eq!(
        render(standard_conversation()),
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"
    );
    // Without a system message: plain turns.
    assert_eq!(
        render(json!([{"role": "user", "content": "hi"}])),
        "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    );
    // System texts are trimmed and joined with nothing between them.
    assert_eq!(
        render(json!([
            {"role": "system", "content": "  Be brief.\n"},
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": " hi \t"},
        ])),
        "<start_of_turn>user\nBe brief.Be kind.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    );
    // A system text waits for the next user turn; a model turn does not take it.
    assert_eq!(
        render(json!([
            {"role": "user", "content": "a"},
            {"role": "system", "content": "S"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ])),
        "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>user\nS\n\nc<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn chatml_fallback_renders_llama_cpps_chatml() {
    let s = with_fallback("chatml");
    let text = s
        .render_chat_value(&standard_conversation(), None)
        .expect("renders")
        .text;
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"
    );
}

/// On Gemma 3 (when cached), the fallback's prompt is the ids llama.cpp feeds the model: BOS,
/// then the rendered text tokenized with control tokens parsed.
#[test]
fn gemma_fallback_tokens_are_llama_cpps_on_gemma3() {
    let Some(s) = gguf_services(GEMMA3, Some("gemma")) else {
        return;
    };
    let rendered = s
        .render_chat_value(&standard_conversation(), None)
        .expect("renders");
    let got = s.encode_chat(&rendered).expect("encodes");
    let bos = s.tokenizer().special_tokens().bos.expect("Gemma has BOS");
    let mut want = vec![bos];
    want.extend(
        s.tokenizer()
            .encode(
                &rendered.text,
                EncodeOptions {
                    add_special: false,
                    parse_special: true,
                },
            )
            .expect("encodes"),
    );
    assert_eq!(got, want);
}

/// The fallbacks render what llama-cpp-python renders with llama.cpp's built-in template of the
/// same name (`llama_chat_apply_template` with the name and no model), on conversations that
/// exercise system messages (first, several, late, alone), whitespace and multiple lines
/// (`scripts/ref/llama_cpp_chat_fallbacks.py` wrote the fixture).
#[test]
fn fallbacks_render_what_llama_cpp_python_renders() {
    let fixture: Json = serde_json::from_str(
        &std::fs::read_to_string(fixture_path("llama_cpp_fallbacks.json")).expect("fixture"),
    )
    .expect("fixture parses");
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10, "{} cases", cases.len());
    for case in cases {
        let format = case["format"].as_str().expect("format");
        let services = with_fallback(format);
        let got = services
            .render_chat_value(&case["messages"], None)
            .unwrap_or_else(|e| panic!("{format}: {e} on {}", case["messages"]))
            .text;
        assert_eq!(
            got,
            case["rendered"].as_str().expect("rendered"),
            "{format} on {}",
            case["messages"]
        );
    }
}
