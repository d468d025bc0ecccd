//! POST /v1/chat/completions: messages (system, user, assistant with tool calls, tool results)
//! rendered with the model's chat template, then generated like a completion. Text inside
//! messages never becomes a control token (see `poot_text::TextServices::encode_chat`); the
//! template's end-of-turn tokens end the answer.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{GenerateRequest, ModelHandle, TokenLogprob};
use serde_json::Value;

use crate::engine::{Finish, SeqSpec};
use crate::error::ApiError;
use crate::http::{App, parse, unix_now};
use crate::openai::{
    ChatChoice, ChatChunkChoice, ChatLogprobs, ChatMessage, ChatRequest, ChatTokenLogprob, Delta,
    Usage,
};
use crate::params::{self, choice_sampler};
use crate::reply::{self, ChoiceOut, Chunks, Heading, alternatives, token_text};

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

pub async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match run(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body)?;
    app.check_generation_model(&req.model)?;
    let vocab = app.handle.config().vocab_size;
    let g = params::generation(&req.sampling, vocab)?;
    let top_logprobs = match (req.logprobs, req.top_logprobs) {
        (false, None) => None,
        (false, Some(_)) => {
            return Err(ApiError::invalid_value(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ));
        }
        (true, top) => Some(params::top_logprobs(top.unwrap_or(0), "top_logprobs")?),
    };
    match req.tool_choice.as_ref() {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice other than \"none\" or \"auto\" is not supported (no guided decoding)",
                Some("tool_choice"),
            ));
        }
    }
    if let Some(format) = &req.response_format
        && format.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(ApiError::invalid(
            "response_format other than {\"type\": \"text\"} is not supported (no guided decoding)",
            Some("response_format"),
        ));
    }
    let tools = match req.tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) if t.is_empty() => None,
        Some(t @ Value::Array(_)) => Some(t),
        Some(_) => return Err(ApiError::invalid_value("tools", "tools must be an array")),
    };
    let messages = messages(req.messages)?;
    let text = app
        .handle
        .text()
        .map_err(|e| ApiError::engine(format!("the model has no tokenizer: {e}")))?;
    let rendered = text
        .render_chat_value(&messages, tools.as_ref())
        .map_err(|e| {
            ApiError::invalid(
                format!("the chat template refused the messages: {e}"),
                Some("messages"),
            )
        })?;
    let prompt = text.encode_chat(&rendered).map_err(|e| {
        ApiError::invalid(
            format!("could not tokenize the messages: {e}"),
            Some("messages"),
        )
    })?;
    if prompt.is_empty() {
        return Err(ApiError::invalid_value(
            "messages",
            "the rendered prompt is empty",
        ));
    }
    let asked = match req.max_completion_tokens {
        Some(m) => params::max_tokens(Some(m), "max_completion_tokens")?,
        None => params::max_tokens(req.max_tokens, "max_tokens")?,
    };
    let room = app.context.saturating_sub(prompt.len());
    let max_new = asked.unwrap_or(room);
    if max_new == 0 || prompt.len() + max_new > app.context {
        return Err(ApiError::context(prompt.len(), max_new, app.context));
    }
    let mut stops = g.stops.clone();
    stops.extend(rendered.turn_stops(g.ignore_eos));
    let seqs: Vec<SeqSpec> = (0..g.n)
        .map(|i| SeqSpec {
            request: GenerateRequest {
                ignore_eos: g.ignore_eos,
                top_logprobs,
                stops: stops.clone(),
                ..GenerateRequest::new(prompt.clone(), max_new, choice_sampler(&g.sampler, i))
            },
            stop_ids: rendered.turn_stop_ids(g.ignore_eos),
        })
        .collect();
    let rx = app.engine.submit(seqs)?;
    let heading = Heading {
        id: format!("chatcmpl-{:016x}", params::fresh_seed()),
        created: unix_now(),
        model: app.model_id.clone(),
        include_usage: g.include_usage,
    };
    if g.stream {
        let chunks = ChatChunks {
            handle: Arc::clone(&app.handle),
            heading,
            n: g.n,
            logprobs: top_logprobs.is_some(),
        };
        return Ok(reply::stream(rx, chunks, g.n, prompt.len(), g.include_usage).await);
    }
    let (outs, completion_tokens) = reply::collect(rx, g.n).await?;
    let mut usage = Usage::default();
    usage.add(prompt.len(), completion_tokens);
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(index, out)| choice(&app.handle, index, out, top_logprobs.is_some()))
        .collect();
    Ok(heading.whole("chat.completion", choices, usage))
}

/// Checks each message's role and content, and flattens content parts to text (the template
/// reads plain strings). `developer` is OpenAI's newer name for `system`.
fn messages(messages: Value) -> Result<Value, ApiError> {
    let Value::Array(list) = messages else {
        return Err(ApiError::invalid_value(
            "messages",
            "messages must be an array",
        ));
    };
    if list.is_empty() {
        return Err(ApiError::invalid_value("messages", "messages is empty"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.into_iter().enumerate() {
        let param = format!("messages[{i}]");
        let bad = |why: &str| ApiError::invalid_value(&param, format!("{param}: {why}"));
        let Value::Object(mut fields) = m else {
            return Err(bad("a message must be an object"));
        };
        let role = match fields.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => r.to_owned(),
            Some(r) => {
                return Err(bad(&format!(
                    "unknown role `{r}` (expected one of {ROLES:?})"
                )));
            }
            None => return Err(bad("a message needs a string role")),
        };
        if role == "developer" {
            fields.insert("role".to_owned(), Value::String("system".to_owned()));
        }
        let content = match fields.remove("content") {
            None | Some(Value::Null) => {
                if role == "assistant" && fields.contains_key("tool_calls") {
                    Value::String(String::new())
                } else {
                    return Err(bad("content is missing"));
                }
            }
            Some(Value::String(s)) => Value::String(s),
            Some(Value::Array(parts)) => Value::String(text_parts(&parts).map_err(|w| bad(&w))?),
            Some(_) => return Err(bad("content must be a string or an array of parts")),
        };
        fields.insert("content".to_owned(), content);
        out.push(Value::Object(fields));
    }
    Ok(Value::Array(out))
}

fn text_parts(parts: &[Value]) -> Result<String, String> {
    let mut text = String::new();
    for p in parts {
        match (
            p.get("type").and_then(Value::as_str),
            p.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(t)) => text.push_str(t),
            (Some(kind), _) if kind != "text" => {
                return Err(format!(
                    "content parts of type `{kind}` are not supported (text only)"
                ));
            }
            _ => return Err("a text content part needs a string `text`".to_owned()),
        }
    }
    Ok(text)
}

fn token_logprob(handle: &ModelHandle, id: u32, lp: &TokenLogprob) -> ChatTokenLogprob {
    let (token, bytes) = token_text(handle, id);
    ChatTokenLogprob {
        token,
        logprob: lp.logprob,
        bytes,
        top_logprobs: alternatives(handle, lp),
    }
}

fn choice(handle: &ModelHandle, index: usize, out: ChoiceOut, logprobs: bool) -> ChatChoice {
    let logprobs = logprobs.then(|| ChatLogprobs {
        content: out
            .tokens
            .iter()
            .filter_map(|t| t.logprob.as_ref().map(|lp| token_logprob(handle, t.id, lp)))
            .collect(),
    });
    ChatChoice {
        index,
        message: ChatMessage {
            role: "assistant",
            content: out.text,
        },
        logprobs,
        finish_reason: out.finish.map(Finish::as_str),
    }
}

struct ChatChunks {
    handle: Arc<ModelHandle>,
    heading: Heading,
    n: usize,
    logprobs: bool,
}

impl ChatChunks {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> Value {
        self.heading.chunk("chat.completion.chunk", choices, usage)
    }
}

impl Chunks for ChatChunks {
    fn opening(&mut self) -> Vec<Value> {
        (0..self.n)
            .map(|index| {
                self.chunk(
                    vec![ChatChunkChoice {
                        index,
                        delta: Delta {
                            role: Some("assistant"),
                            content: Some(String::new()),
                        },
                        logprobs: None,
                        finish_reason: None,
                    }],
                    None,
                )
            })
            .collect()
    }

    fn token(
        &mut self,
        choice: usize,
        id: u32,
        text: &str,
        logprob: Option<&TokenLogprob>,
    ) -> Option<Value> {
        let logprobs = match (self.logprobs, logprob) {
            (true, Some(lp)) => Some(ChatLogprobs {
                content: vec![token_logprob(&self.handle, id, lp)],
            }),
            _ => None,
        };
        if text.is_empty() && logprobs.is_none() {
            return None;
        }
        Some(self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: Delta {
                    role: None,
                    content: Some(text.to_owned()),
                },
                logprobs,
                finish_reason: None,
            }],
            None,
        ))
    }

    fn done(&mut self, choice: usize, text: &str, finish: Finish) -> Value {
        self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: Delta {
                    role: None,
                    content: (!text.is_empty()).then(|| text.to_owned()),
                },
                logprobs: None,
                finish_reason: Some(finish.as_str()),
            }],
            None,
        )
    }

    fn usage(&self, usage: Usage) -> Value {
        self.chunk(Vec::new(), Some(usage))
    }
}
