//! POST /v1/chat/completions: messages (system, user, assistant with tool calls, tool results)
//! rendered with the model's chat template, then generated like a completion. Text inside
//! messages never becomes a control token (see `poot_text::TextServices::encode_chat`); the
//! template's end-of-turn tokens end the answer. When the request offers tools, calls in the
//! model's syntax come back as `tool_calls` (see `tool_calls`).
//!
//! This is also the chat path the other chat-shaped routes (`messages`, `responses`) take: they
//! translate their request into a [`Conversation`] and sampling fields, and go through
//! [`render`], [`submit`] and [`answer`] as this route does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{GenerateRequest, ModelHandle, TokenLogprob};
use poot_text::RenderedChat;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Event, Finish, SeqSpec};
use crate::error::ApiError;
use crate::guided;
use crate::http::{App, parse, unix_now};
use crate::openai::{
    ChatChoice, ChatChunkChoice, ChatLogprobs, ChatMessage, ChatRequest, ChatTokenLogprob, Delta,
    FunctionCall, FunctionDelta, ToolCallDelta, ToolCallOut, Usage,
};
use crate::params::{self, Generation, choice_sampler};
use crate::reply::{self, ChoiceOut, Chunks, Frame, Heading, alternatives, token_text};
use crate::tool_calls::{self, Answer, Piece, ToolCall};

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
    let mut g = params::generation(&req.sampling, vocab)?;
    g.lora = app.lora_for(&req.model);
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
    let (tool_use, mut forced) = guided::openai_tool_choice(req.tool_choice.as_ref())?;
    if let Some(guided::Forced::Any { parallel }) = &mut forced {
        *parallel = req.parallel_tool_calls.unwrap_or(true);
    }
    let tools = match req.tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) if t.is_empty() => None,
        Some(t @ Value::Array(_)) => Some(t),
        Some(_) => return Err(ApiError::invalid_value("tools", "tools must be an array")),
    };
    let mut found = Vec::new();
    if let Some(format) = &req.response_format
        && let Some(c) = guided::from_response_format(format, "response_format")?
    {
        found.push((c, "response_format"));
    }
    found.extend(guided::from_extensions(&req.sampling)?);
    if let Some(forced) = &forced {
        found.push((
            guided::forced_call(app, tools.as_ref(), forced, "tool_choice")?,
            "tool_choice",
        ));
    }
    g.guide = guided::resolve(app, found)?;
    let prompt = render(
        app,
        Conversation {
            messages: messages(req.messages)?,
            tools,
        },
    )?;
    let asked = match req.max_completion_tokens {
        Some(m) => params::max_tokens(Some(m), "max_completion_tokens")?,
        None => params::max_tokens(req.max_tokens, "max_tokens")?,
    };
    let rx = submit(app, &prompt, &g, asked, top_logprobs)?;
    let heading = Heading {
        id: format!("chatcmpl-{:016x}", params::fresh_seed()),
        created: unix_now(),
        model: app.model_id.clone(),
        include_usage: g.include_usage,
    };
    let answers = (0..g.n).map(|_| answer(app, &prompt, tool_use)).collect();
    if g.stream {
        let chunks = ChatChunks {
            handle: Arc::clone(&app.handle),
            heading,
            n: g.n,
            logprobs: top_logprobs.is_some(),
            answers,
            sent_calls: vec![0; g.n],
        };
        return Ok(reply::stream(rx, chunks, g.n, prompt.ids.len()).await);
    }
    let (outs, completion_tokens) = reply::collect(rx, g.n).await?;
    let mut usage = Usage::default();
    usage.add(prompt.ids.len(), completion_tokens);
    let choices = outs
        .into_iter()
        .zip(answers)
        .enumerate()
        .map(|(index, (out, answer))| {
            choice(&app.handle, index, &out, answer, top_logprobs.is_some())
        })
        .collect();
    Ok(heading.whole("chat.completion", choices, usage))
}

/// Whether the model may call the tools it was shown (`tool_choice`); a forced call
/// (`required`, a named tool) parses calls too, its answer constrained by guided decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolUse {
    /// Calls in the answer are parsed.
    Auto,
    /// The tools are shown, and the answer is all text.
    None,
}

/// A conversation in the chat template's terms: OpenAI chat messages (roles and content
/// checked, content flattened to strings) and OpenAI chat tools.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    pub messages: Value,
    pub tools: Option<Value>,
}

/// A conversation rendered and tokenized.
#[derive(Clone, Debug)]
pub struct ChatPrompt {
    pub rendered: RenderedChat,
    pub ids: Vec<u32>,
    /// The names of the tools the prompt offers.
    pub tool_names: Vec<String>,
}

/// Renders `conversation` with the model's chat template and tokenizes it.
pub fn render(app: &App, conversation: Conversation) -> Result<ChatPrompt, ApiError> {
    let Conversation {
        mut messages,
        mut tools,
    } = conversation;
    let tool_names = tools
        .as_ref()
        .map(tool_calls::tool_names)
        .unwrap_or_default();
    match app.tool_syntax.as_ref().map(|s| s.format) {
        Some(tool_calls::ToolFormat::Generic) => {
            // The tools go into the messages: the template has nowhere to show them.
            messages = tool_calls::generic_conversation(messages, tools.as_ref());
            tools = None;
        }
        Some(format) if format.short_ids() => tool_calls::shorten_call_ids(&mut messages),
        _ => {}
    }
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
    let ids = text.encode_chat(&rendered).map_err(|e| {
        ApiError::invalid(
            format!("could not tokenize the messages: {e}"),
            Some("messages"),
        )
    })?;
    if ids.is_empty() {
        return Err(ApiError::invalid_value(
            "messages",
            "the rendered prompt is empty",
        ));
    }
    Ok(ChatPrompt {
        rendered,
        ids,
        tool_names,
    })
}

/// Queues `g.n` answers to `prompt` of at most `max_tokens` tokens each (by default, what is
/// left of the context); the template's end-of-turn tokens and texts end them.
pub fn submit(
    app: &App,
    prompt: &ChatPrompt,
    g: &Generation,
    max_tokens: Option<usize>,
    top_logprobs: Option<usize>,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let room = app.context.saturating_sub(prompt.ids.len());
    let max_new = max_tokens.unwrap_or(room);
    if max_new == 0 || prompt.ids.len() + max_new > app.context {
        return Err(ApiError::context(prompt.ids.len(), max_new, app.context));
    }
    let mut stops = g.stops.clone();
    stops.extend(prompt.rendered.turn_stops(g.ignore_eos));
    let seqs: Vec<SeqSpec> = (0..g.n)
        .map(|i| SeqSpec {
            request: GenerateRequest {
                ignore_eos: g.ignore_eos,
                speculate: g.speculate,
                top_logprobs,
                stops: stops.clone(),
                lora: g.lora.clone(),
                guide: g.guide.clone(),
                ..GenerateRequest::new(prompt.ids.clone(), max_new, choice_sampler(&g.sampler, i))
            },
            stop_ids: prompt.rendered.turn_stop_ids(g.ignore_eos),
        })
        .collect();
    app.engine.submit(seqs)
}

/// How one answer to `prompt` is read: for calls to its tools when it offers some, `tool_use`
/// allows them and the model's chat format has a call syntax; else as text.
pub fn answer(app: &App, prompt: &ChatPrompt, tool_use: ToolUse) -> Answer {
    match &app.tool_syntax {
        Some(syntax) if tool_use == ToolUse::Auto && !prompt.tool_names.is_empty() => {
            Answer::with_tools(syntax, prompt.tool_names.clone())
        }
        _ => Answer::plain(),
    }
}

/// The finish reason of an answer: `tool_calls` when it ended its turn after calls.
fn finish_reason(finish: Finish, calls: usize) -> &'static str {
    match finish {
        Finish::Stop if calls > 0 => "tool_calls",
        other => other.as_str(),
    }
}

/// Checks each message's role and content, and flattens content parts to text (the template
/// reads plain strings). `developer` is OpenAI's newer name for `system`.
pub fn messages(messages: Value) -> Result<Value, ApiError> {
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

fn choice(
    handle: &ModelHandle,
    index: usize,
    out: &ChoiceOut,
    answer: Answer,
    logprobs: bool,
) -> ChatChoice {
    let logprobs = logprobs.then(|| ChatLogprobs {
        content: out
            .tokens
            .iter()
            .filter_map(|t| t.logprob.as_ref().map(|lp| token_logprob(handle, t.id, lp)))
            .collect(),
    });
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in answer.whole(out) {
        match piece {
            Piece::Text(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(tool_call_out(c)),
        }
    }
    let finish_reason = out.finish.map(|f| finish_reason(f, calls.len()));
    ChatChoice {
        index,
        message: ChatMessage {
            role: "assistant",
            content: (calls.is_empty() || !content.is_empty()).then_some(content),
            tool_calls: (!calls.is_empty()).then_some(calls),
        },
        logprobs,
        finish_reason,
    }
}

fn tool_call_out(call: ToolCall) -> ToolCallOut {
    ToolCallOut {
        id: tool_calls::call_id("call_"),
        kind: "function",
        function: FunctionCall {
            name: call.name,
            arguments: call.arguments,
        },
    }
}

struct ChatChunks {
    handle: Arc<ModelHandle>,
    heading: Heading,
    n: usize,
    logprobs: bool,
    /// Per choice: its text and calls so far.
    answers: Vec<Answer>,
    /// Per choice: calls sent.
    sent_calls: Vec<usize>,
}

impl ChatChunks {
    fn chunk(&self, choice: ChatChunkChoice) -> Frame {
        Frame::Data(
            self.heading
                .chunk("chat.completion.chunk", vec![choice], None),
        )
    }

    fn delta(&self, index: usize, delta: Delta, logprobs: Option<ChatLogprobs>) -> Frame {
        self.chunk(ChatChunkChoice {
            index,
            delta,
            logprobs,
            finish_reason: None,
        })
    }

    /// The chunks of `pieces`: text as content, each call as a chunk with its id and name,
    /// then one with its arguments. `logprobs` go with the first chunk.
    fn pieces(
        &mut self,
        index: usize,
        pieces: Vec<Piece>,
        mut logprobs: Option<ChatLogprobs>,
    ) -> Vec<Frame> {
        let mut frames = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Text(t) => {
                    let delta = Delta {
                        content: Some(t),
                        ..Delta::default()
                    };
                    frames.push(self.delta(index, delta, logprobs.take()));
                }
                Piece::Call(c) => {
                    let at = self.sent_calls.get(index).copied().unwrap_or(0);
                    if let Some(n) = self.sent_calls.get_mut(index) {
                        *n += 1;
                    }
                    let call = tool_call_out(c);
                    let head = ToolCallDelta {
                        index: at,
                        id: Some(call.id),
                        kind: Some("function"),
                        function: FunctionDelta {
                            name: Some(call.function.name),
                            arguments: String::new(),
                        },
                    };
                    let args = ToolCallDelta {
                        index: at,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: call.function.arguments,
                        },
                    };
                    for (d, lp) in [(head, logprobs.take()), (args, None)] {
                        let delta = Delta {
                            tool_calls: Some(vec![d]),
                            ..Delta::default()
                        };
                        frames.push(self.delta(index, delta, lp));
                    }
                }
            }
        }
        if let Some(lp) = logprobs {
            let delta = Delta {
                content: Some(String::new()),
                ..Delta::default()
            };
            frames.push(self.delta(index, delta, Some(lp)));
        }
        frames
    }
}

impl Chunks for ChatChunks {
    fn opening(&mut self) -> Vec<Frame> {
        (0..self.n)
            .map(|index| {
                let delta = Delta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    tool_calls: None,
                };
                self.delta(index, delta, None)
            })
            .collect()
    }

    fn token(
        &mut self,
        choice: usize,
        id: u32,
        text: &str,
        logprob: Option<&TokenLogprob>,
    ) -> Vec<Frame> {
        let logprobs = match (self.logprobs, logprob) {
            (true, Some(lp)) => Some(ChatLogprobs {
                content: vec![token_logprob(&self.handle, id, lp)],
            }),
            _ => None,
        };
        let pieces = match self.answers.get_mut(choice) {
            Some(a) => a.token(id, text),
            None => Vec::new(),
        };
        self.pieces(choice, pieces, logprobs)
    }

    fn done(&mut self, choice: usize, text: &str, finish: Finish) -> Vec<Frame> {
        let pieces = match self.answers.get_mut(choice) {
            Some(a) => a.end(text),
            None => Vec::new(),
        };
        let calls = self.answers.get(choice).map_or(0, Answer::calls);
        // The last text goes with the finish reason, as it did before calls were parsed.
        let (pieces, last) = match pieces.split_last() {
            Some((Piece::Text(t), rest)) => (rest.to_vec(), Some(t.clone())),
            _ => (pieces, None),
        };
        let mut frames = self.pieces(choice, pieces, None);
        frames.push(self.chunk(ChatChunkChoice {
            index: choice,
            delta: Delta {
                content: last,
                ..Delta::default()
            },
            logprobs: None,
            finish_reason: Some(finish_reason(finish, calls)),
        }));
        frames
    }

    fn closing(&mut self, usage: Usage) -> Vec<Frame> {
        reply::openai_closing(&self.heading, "chat.completion.chunk", usage)
    }
}

#[cfg(test)]
mod tests {
    use poot_llm::LoadOptions;
    use poot_models::Registry;
    use serde_json::json;

    use super::*;
    use crate::reply::TokenOut;
    use crate::tool_calls::{ToolFormat, ToolSyntax};

    fn handle() -> Arc<ModelHandle> {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat");
        let registry = Registry::builtin().expect("the builtin registry builds");
        Arc::new(
            ModelHandle::load(&dir, &registry, &LoadOptions::default()).expect("fixture loads"),
        )
    }

    /// The fixture's template writes Hermes calls; `<tool_call>` is plain text in its vocabulary.
    fn syntax(handle: &ModelHandle) -> ToolSyntax {
        let text = handle.text().expect("the fixture has a tokenizer");
        let syntax = ToolSyntax::detect(
            text.chat_templates().iter().map(|t| t.source()),
            text.tokenizer(),
        )
        .expect("the fixture's template shows calls");
        assert_eq!(syntax.format, ToolFormat::Hermes);
        syntax
    }

    fn out(pieces: &[&str], tail: &str, finish: Finish) -> ChoiceOut {
        ChoiceOut {
            text: pieces.concat() + tail,
            tokens: pieces
                .iter()
                .enumerate()
                .map(|(i, t)| TokenOut {
                    id: 10 + i as u32,
                    text: (*t).to_owned(),
                    logprob: None,
                })
                .collect(),
            tail: tail.to_owned(),
            finish: Some(finish),
        }
    }

    const CALL: [&str; 4] = [
        "Checking.\n<tool_",
        "call>{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}</tool_call>\n",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
    ];

    fn names() -> Vec<String> {
        vec!["get_weather".to_owned()]
    }

    #[test]
    fn a_whole_answer_with_calls_has_tool_calls_and_finishes_with_them() {
        let handle = handle();
        let syntax = syntax(&handle);
        let answer = Answer::with_tools(&syntax, names());
        let c = choice(&handle, 0, &out(&CALL, "", Finish::Stop), answer, false);
        let v = serde_json::to_value(&c).expect("serializes");
        assert_eq!(v["finish_reason"], "tool_calls");
        assert_eq!(v["message"]["content"], "Checking.\n");
        let calls = v["message"]["tool_calls"].as_array().expect("calls");
        assert_eq!(calls.len(), 2);
        for (call, city) in calls.iter().zip(["Paris", "Rome"]) {
            assert!(call["id"].as_str().expect("id").starts_with("call_"));
            assert_eq!(call["type"], "function");
            assert_eq!(call["function"]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().expect("a string"))
                    .expect("arguments are JSON");
            assert_eq!(args, json!({"city": city}));
        }
        assert_ne!(calls[0]["id"], calls[1]["id"]);
        // Only calls: content is null. Cut off by the limit: `length`.
        let c = choice(
            &handle,
            0,
            &out(&CALL[3..], "", Finish::Length),
            Answer::with_tools(&syntax, names()),
            false,
        );
        let v = serde_json::to_value(&c).expect("serializes");
        assert_eq!(v["message"]["content"], Value::Null);
        assert_eq!(v["finish_reason"], "length");
        // A call to a tool the request did not offer, or no tools at all: text.
        for answer in [
            Answer::with_tools(&syntax, vec!["other".to_owned()]),
            Answer::plain(),
        ] {
            let c = choice(&handle, 0, &out(&CALL, "", Finish::Stop), answer, false);
            let v = serde_json::to_value(&c).expect("serializes");
            assert_eq!(v["message"]["content"], CALL.concat());
            assert!(v["message"].get("tool_calls").is_none(), "{v}");
            assert_eq!(v["finish_reason"], "stop");
        }
    }

    #[test]
    fn streamed_calls_come_as_deltas_with_index_id_name_then_arguments() {
        let handle = handle();
        let syntax = syntax(&handle);
        let mut chunks = ChatChunks {
            handle: Arc::clone(&handle),
            heading: Heading {
                id: "chatcmpl-test".to_owned(),
                created: 0,
                model: "tiny-chat".to_owned(),
                include_usage: false,
            },
            n: 1,
            logprobs: false,
            answers: vec![Answer::with_tools(&syntax, names())],
            sent_calls: vec![0],
        };
        let mut frames = chunks.opening();
        for (i, t) in CALL.iter().enumerate() {
            frames.extend(chunks.token(0, i as u32, t, None));
        }
        frames.extend(chunks.done(0, "", Finish::Stop));
        frames.extend(chunks.closing(Usage::default()));
        assert_eq!(frames.last(), Some(&Frame::Done));
        let deltas: Vec<&Value> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Data(v) => Some(&v["choices"][0]),
                _ => None,
            })
            .collect();
        let content: String = deltas
            .iter()
            .filter_map(|d| d["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, "Checking.\n");
        // No text that belongs to a call was streamed as content.
        assert!(!content.contains("<tool"));
        let calls: Vec<&Value> = deltas
            .iter()
            .filter_map(|d| d["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        assert_eq!(calls.len(), 4, "{calls:?}");
        for (k, city) in ["Paris", "Rome"].iter().enumerate() {
            let (head, args) = (calls[2 * k], calls[2 * k + 1]);
            assert_eq!(head["index"], k);
            assert!(head["id"].as_str().expect("id").starts_with("call_"));
            assert_eq!(head["type"], "function");
            assert_eq!(head["function"]["name"], "get_weather");
            assert_eq!(head["function"]["arguments"], "");
            assert_eq!(args["index"], k);
            assert!(args.get("id").is_none());
            let parsed: Value =
                serde_json::from_str(args["function"]["arguments"].as_str().expect("a string"))
                    .expect("JSON");
            assert_eq!(parsed, json!({"city": city}));
        }
        let finishes: Vec<&Value> = deltas
            .iter()
            .map(|d| &d["finish_reason"])
            .filter(|f| !f.is_null())
            .collect();
        assert_eq!(finishes, vec!["tool_calls"]);
    }
}
