//! POST /tokenize and /detokenize, in both llama.cpp's and vLLM's shapes.
//!
//! `/tokenize` takes the text as `content` (llama.cpp; sequence tokens are added only with
//! `add_special: true`) or `prompt` (vLLM; added unless `add_special_tokens: false`), or a chat
//! as `messages` (vLLM; rendered with the chat template as a chat completion is), and answers
//! `{"tokens", "count", "max_model_len"}`; llama.cpp's `with_pieces` gives each token as
//! `{"id", "piece"}`. Control tokens spelled in the text are recognized, as the completions
//! route does. `/detokenize` takes `{"tokens": [...]}` and answers the text under both names,
//! `content` and `prompt`, control tokens included. An id outside the vocabulary is a 400.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_text::{EncodeOptions, TextServices};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::chat::{self, Conversation};
use crate::error::ApiError;
use crate::http::{App, parse};

#[derive(Clone, Debug, Deserialize)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    /// llama.cpp's name for the text.
    pub content: Option<String>,
    /// vLLM's name for the text.
    pub prompt: Option<String>,
    /// vLLM: a chat to render and tokenize.
    pub messages: Option<Value>,
    /// llama.cpp: add the sequence tokens (BOS); default false.
    pub add_special: Option<bool>,
    /// vLLM: add the sequence tokens; default true.
    pub add_special_tokens: Option<bool>,
    /// llama.cpp: answer each token as `{"id", "piece"}`.
    #[serde(default)]
    pub with_pieces: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

pub async fn tokenize(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run_tokenize(&app, body) {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn detokenize(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run_detokenize(&app, body) {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

fn text_services(app: &App) -> Result<&TextServices, ApiError> {
    app.handle
        .text()
        .map_err(|e| ApiError::engine(format!("the model has no tokenizer: {e}")))
}

fn check_model(app: &App, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) => app.check_generation_model(m),
        None => Ok(()),
    }
}

fn run_tokenize(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let req: TokenizeRequest = parse(body)?;
    check_model(app, req.model.as_deref())?;
    let text = text_services(app)?;
    let ids = match (req.content, req.prompt, req.messages) {
        (Some(s), None, None) => encode(text, &s, req.add_special.unwrap_or(false), "content")?,
        (None, Some(s), None) => {
            let add = req.add_special_tokens.or(req.add_special).unwrap_or(true);
            encode(text, &s, add, "prompt")?
        }
        (None, None, Some(messages)) => {
            let conversation = Conversation {
                messages: chat::messages(messages)?,
                tools: None,
            };
            chat::render(app, conversation)?.ids
        }
        (None, None, None) => {
            return Err(ApiError::invalid(
                "give the text as `content` or `prompt`, or a chat as `messages`",
                None,
            ));
        }
        _ => {
            return Err(ApiError::invalid(
                "give only one of `content`, `prompt` and `messages`",
                None,
            ));
        }
    };
    let tokens: Vec<Value> = if req.with_pieces {
        ids.iter()
            .map(|&id| {
                let bytes = text
                    .tokenizer()
                    .token_to_piece(id, false)
                    .unwrap_or_default();
                // llama.cpp: the piece as a string, or its bytes when they are not UTF-8.
                let piece = match String::from_utf8(bytes) {
                    Ok(s) => Value::String(s),
                    Err(e) => json!(e.into_bytes()),
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(json!({"tokens": tokens, "count": ids.len(), "max_model_len": app.context}))
}

fn encode(
    text: &TextServices,
    s: &str,
    add_special: bool,
    param: &str,
) -> Result<Vec<u32>, ApiError> {
    let options = EncodeOptions {
        add_special,
        parse_special: true,
    };
    text.tokenizer()
        .encode(s, options)
        .map_err(|e| ApiError::invalid(format!("could not tokenize the text: {e}"), Some(param)))
}

fn run_detokenize(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let req: DetokenizeRequest = parse(body)?;
    check_model(app, req.model.as_deref())?;
    let text = text_services(app)?;
    let vocab = app
        .handle
        .config()
        .vocab_size
        .min(text.tokenizer().vocab_size());
    let ids = req
        .tokens
        .iter()
        .map(|&t| {
            u32::try_from(t)
                .ok()
                .filter(|&id| (id as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::invalid_value(
                        "tokens",
                        format!(
                            "token {t} is not an id in the vocabulary (0 to {})",
                            vocab.saturating_sub(1)
                        ),
                    )
                })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let content = text.tokenizer().decode(&ids, false).map_err(|e| {
        ApiError::invalid_value("tokens", format!("could not decode the tokens: {e}"))
    })?;
    Ok(json!({"content": content, "prompt": content}))
}
