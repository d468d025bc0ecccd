//! POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat
//! path. A request becomes a [`Conversation`] (the system prompt first, `tool_use` blocks as an
//! assistant's tool calls, `tool_result` blocks as tool messages, tools as function tools) and
//! sampling fields, and goes through the chat template, the engine and the tool-call parser as a
//! chat completion does; the answer comes back as text and `tool_use` blocks, whole or as
//! Anthropic's stream of events. Errors are in Anthropic's shape.
//!
//! Forcing a tool (`tool_choice` `any` or `tool`) constrains the answer to the model's call
//! syntax by guided decoding (see `guided`).
//!
//! Not built: images and documents (the models served read text) and extended thinking; each
//! is a 400 that says so. Nor is prefill: a last assistant message is rendered as a finished turn and the
//! answer is a new one.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{ModelHandle, TokenLogprob};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::chat::{self, Conversation, ToolUse};
use crate::engine::Finish;
use crate::error::ApiError;
use crate::guided::{self, Forced};
use crate::http::{App, parse};
use crate::openai::{OneOrMany, SamplingFields, Usage};
use crate::params;
use crate::reply::{self, Chunks, Frame};
use crate::tool_calls::{self, Answer, Piece, ToolCall};

/// A Messages request (and a count_tokens request, which needs no `max_tokens`). Fields the
/// server does not read (`metadata`, `service_tier`, `cache_control` on blocks) are ignored.
#[derive(Clone, Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: Option<i64>,
    pub messages: Value,
    pub system: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub thinking: Option<Value>,
    /// Extension: `false` decodes this request one token a step when the server speculates.
    pub speculative: Option<bool>,
}

pub async fn messages(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_anthropic_response(),
    }
}

pub async fn count_tokens(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let counted = (|| {
        let req: MessagesRequest = parse(body)?;
        app.check_generation_model(&req.model)?;
        let prompt = chat::render(&app, conversation(&req)?)?;
        Ok::<_, ApiError>(json!({"input_tokens": prompt.ids.len()}))
    })();
    match counted {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_anthropic_response(),
    }
}

async fn run(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: MessagesRequest = parse(body)?;
    app.check_generation_model(&req.model)?;
    let Some(max_tokens) = req.max_tokens else {
        return Err(ApiError::invalid(
            "max_tokens: Field required",
            Some("max_tokens"),
        ));
    };
    let max_tokens = params::max_tokens(Some(max_tokens), "max_tokens")?;
    let (tool_use, forced) = tool_choice(req.tool_choice.as_ref())?;
    if let Some(thinking) = &req.thinking
        && thinking.get("type").and_then(Value::as_str) != Some("disabled")
    {
        return Err(ApiError::invalid(
            "thinking: extended thinking is not supported by this server",
            Some("thinking"),
        ));
    }
    let stops = req.stop_sequences.clone().unwrap_or_default();
    let fields = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: Some(OneOrMany::Many(stops.clone())),
        stream: req.stream,
        speculative: req.speculative,
        ..SamplingFields::default()
    };
    let mut g = params::generation(&fields, app.handle.config().vocab_size).map_err(|e| {
        // Anthropic spells the stop strings `stop_sequences`.
        if e.param.as_deref() == Some("stop") {
            ApiError {
                message: format!("stop_sequences: {}", e.message),
                param: Some("stop_sequences".to_owned()),
                ..e
            }
        } else {
            e
        }
    })?;
    g.lora = app.lora_for(&req.model);
    let conversation = conversation(&req)?;
    if let Some(forced) = &forced {
        let c = guided::forced_call(app, conversation.tools.as_ref(), forced, "tool_choice")?;
        g.guide = guided::resolve(app, vec![(c, "tool_choice")])?;
    }
    let prompt = chat::render(app, conversation)?;
    let rx = chat::submit(app, &prompt, &g, max_tokens, None)?;
    let answer = chat::answer(app, &prompt, tool_use);
    let shell = Shell {
        id: format!(
            "msg_{:016x}{:08x}",
            params::fresh_seed(),
            params::fresh_seed() as u32
        ),
        model: app.model_id.clone(),
        input_tokens: prompt.ids.len(),
    };
    if g.stream {
        let events = MessageEvents {
            handle: Arc::clone(&app.handle),
            shell,
            answer,
            stops,
            ids: Vec::new(),
            text: String::new(),
            blocks: 0,
            open_text: false,
            pinged: false,
            stop: ("end_turn", None),
        };
        return Ok(reply::stream(rx, events, 1, prompt.ids.len()).await);
    }
    let (outs, completion_tokens) = reply::collect(rx, 1).await?;
    let out = outs
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::engine("the engine answered no choice"))?;
    let mut content = Vec::new();
    let mut calls = 0;
    for piece in answer.whole(&out) {
        match piece {
            Piece::Text(text) => content.push(Block::Text { text }),
            Piece::Call(call) => {
                calls += 1;
                content.push(tool_use_block(call));
            }
        }
    }
    if content.is_empty() {
        content.push(Block::Text {
            text: String::new(),
        });
    }
    let ids: Vec<u32> = out.tokens.iter().map(|t| t.id).collect();
    let (stop_reason, stop_sequence) = stop_reason(
        &app.handle,
        out.finish.unwrap_or(Finish::Length),
        calls,
        (&ids, &out.text),
        &stops,
    );
    let message = Message {
        id: shell.id,
        kind: "message",
        role: "assistant",
        model: shell.model,
        content,
        stop_reason: Some(stop_reason),
        stop_sequence,
        usage: MessageUsage {
            input_tokens: shell.input_tokens,
            output_tokens: completion_tokens,
        },
    };
    Ok(axum::Json(message).into_response())
}

/// `tool_choice`: `auto` (the default), `none`, `any` (one or more calls) and `tool` (one call
/// to the tool it names).
fn tool_choice(choice: Option<&Value>) -> Result<(ToolUse, Option<Forced>), ApiError> {
    let kind = match choice {
        None | Some(Value::Null) => return Ok((ToolUse::Auto, None)),
        Some(c) => c.get("type").and_then(Value::as_str),
    };
    match kind {
        Some("auto") => Ok((ToolUse::Auto, None)),
        Some("none") => Ok((ToolUse::None, None)),
        // Anthropic allows several calls unless `disable_parallel_tool_use`.
        Some("any") => {
            let parallel = !choice
                .and_then(|c| c.get("disable_parallel_tool_use"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Ok((ToolUse::Auto, Some(Forced::Any { parallel })))
        }
        Some("tool") => match choice.and_then(|c| c.get("name")).and_then(Value::as_str) {
            Some(name) => Ok((ToolUse::Auto, Some(Forced::Named(name.to_owned())))),
            None => Err(ApiError::invalid(
                "tool_choice: type `tool` needs the tool's `name`",
                Some("tool_choice"),
            )),
        },
        Some(k) => Err(ApiError::invalid(
            format!("tool_choice: unknown type `{k}` (expected auto, any, tool or none)"),
            Some("tool_choice"),
        )),
        None => Err(ApiError::invalid(
            "tool_choice: an object with a string `type` is required",
            Some("tool_choice"),
        )),
    }
}

/// The request as a chat conversation.
fn conversation(req: &MessagesRequest) -> Result<Conversation, ApiError> {
    let mut out = Vec::new();
    if let Some(system) = &req.system {
        let text = match system {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => texts(blocks, "system")?,
            _ => {
                return Err(bad("system", "must be a string or an array of text blocks"));
            }
        };
        if !text.is_empty() {
            out.push(json!({"role": "system", "content": text}));
        }
    }
    let Value::Array(list) = &req.messages else {
        return Err(bad("messages", "must be an array"));
    };
    if list.is_empty() {
        return Err(bad("messages", "at least one message is required"));
    }
    // Tool names by call id, for tool results that templates print with the tool's name.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages.{i}");
        let role = m.get("role").and_then(Value::as_str);
        let role = match role {
            Some(r @ ("user" | "assistant")) => r,
            Some(r) => {
                return Err(bad(
                    &at,
                    &format!(
                        "unknown role `{r}` (expected user or assistant; the system prompt goes in `system`)"
                    ),
                ));
            }
            None => return Err(bad(&at, "a message needs a string `role`")),
        };
        match m.get("content") {
            Some(Value::String(s)) => out.push(json!({"role": role, "content": s})),
            Some(Value::Array(blocks)) if role == "assistant" => {
                out.push(assistant(blocks, &at, &mut names)?);
            }
            Some(Value::Array(blocks)) => user(blocks, &at, &names, &mut out)?,
            _ => {
                return Err(bad(
                    &format!("{at}.content"),
                    "must be a string or an array of content blocks",
                ));
            }
        }
    }
    let tools = match &req.tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) if t.is_empty() => None,
        Some(Value::Array(t)) => Some(Value::Array(
            t.iter()
                .enumerate()
                .map(|(i, tool)| function_tool(tool, i))
                .collect::<Result<_, _>>()?,
        )),
        Some(_) => return Err(bad("tools", "must be an array")),
    };
    Ok(Conversation {
        messages: Value::Array(out),
        tools,
    })
}

/// A 400 naming where in the request the fault is.
fn bad(at: &str, why: &str) -> ApiError {
    ApiError::invalid(format!("{at}: {why}"), Some(at))
}

/// The type of content block at `at`, refused unless it is one of `allowed`.
fn block_type<'a>(block: &'a Value, at: &str, allowed: &[&str]) -> Result<&'a str, ApiError> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(at, "a content block needs a string `type`"))?;
    if allowed.contains(&kind) {
        return Ok(kind);
    }
    let why = match kind {
        "image" | "document" | "search_result" => format!(
            "content blocks of type `{kind}` are not supported: this server's models read text only"
        ),
        "thinking" | "redacted_thinking" => format!(
            "content blocks of type `{kind}` are not supported: this server does no extended thinking"
        ),
        "text" | "tool_use" | "tool_result" => {
            format!("a `{kind}` block is not allowed here (allowed: {allowed:?})")
        }
        other => format!("unknown content block type `{other}` (allowed here: {allowed:?})"),
    };
    Err(bad(at, &why))
}

fn text_of<'a>(block: &'a Value, at: &str) -> Result<&'a str, ApiError> {
    block
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(at, "a text block needs a string `text`"))
}

/// Text blocks joined.
fn texts(blocks: &[Value], at: &str) -> Result<String, ApiError> {
    let mut parts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.{j}");
        block_type(b, &at, &["text"])?;
        parts.push(text_of(b, &at)?);
    }
    Ok(parts.join("\n"))
}

/// An assistant message: its text, and its `tool_use` blocks as tool calls.
fn assistant(
    blocks: &[Value],
    at: &str,
    names: &mut HashMap<String, String>,
) -> Result<Value, ApiError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        match block_type(b, &at, &["text", "tool_use"])? {
            "text" => text.push_str(text_of(b, &at)?),
            _ => {
                let field = |k: &str| {
                    b.get(k)
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad(&at, &format!("a tool_use block needs a string `{k}`")))
                };
                let (id, name) = (field("id")?, field("name")?);
                let input = match b.get("input") {
                    Some(v @ Value::Object(_)) => v.clone(),
                    _ => return Err(bad(&at, "a tool_use block needs an object `input`")),
                };
                names.insert(id.to_owned(), name.to_owned());
                calls.push(json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": input}}));
            }
        }
    }
    let mut m = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    Ok(m)
}

/// A user message: its `tool_result` blocks become tool messages and its text a user message,
/// in the order they come.
fn user(
    blocks: &[Value],
    at: &str,
    names: &HashMap<String, String>,
    out: &mut Vec<Value>,
) -> Result<(), ApiError> {
    let mut text = String::new();
    let mut any_text = false;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        match block_type(b, &at, &["text", "tool_result"])? {
            "text" => {
                text.push_str(text_of(b, &at)?);
                any_text = true;
            }
            _ => {
                if any_text {
                    out.push(json!({"role": "user", "content": std::mem::take(&mut text)}));
                    any_text = false;
                }
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(&at, "a tool_result block needs a string `tool_use_id`"))?;
                let content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(inner)) => texts(inner, &format!("{at}.content"))?,
                    Some(_) => {
                        return Err(bad(
                            &at,
                            "tool_result content must be a string or an array of text blocks",
                        ));
                    }
                };
                let mut m = json!({"role": "tool", "tool_call_id": id, "content": content});
                if let Some(name) = names.get(id) {
                    m["name"] = Value::String(name.clone());
                }
                out.push(m);
            }
        }
    }
    if any_text {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// An Anthropic tool (`name`, `description`, `input_schema`) as a chat function tool.
fn function_tool(tool: &Value, i: usize) -> Result<Value, ApiError> {
    let at = format!("tools.{i}");
    if let Some(kind) = tool.get("type").and_then(Value::as_str)
        && kind != "custom"
    {
        return Err(bad(
            &at,
            &format!(
                "tool type `{kind}` is not supported: this server runs client tools (name, description, input_schema) only"
            ),
        ));
    }
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(&at, "a tool needs a string `name`"))?;
    let schema = match tool.get("input_schema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => return Err(bad(&at, "a tool needs an object `input_schema`")),
    };
    let mut function = json!({"name": name, "parameters": schema});
    if let Some(d) = tool.get("description").and_then(Value::as_str) {
        function["description"] = Value::String(d.to_owned());
    }
    Ok(json!({"type": "function", "function": function}))
}

/// What every event of one message repeats.
struct Shell {
    id: String,
    model: String,
    input_tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

#[derive(Clone, Debug, Serialize)]
struct MessageUsage {
    input_tokens: usize,
    output_tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
struct Message {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: String,
    content: Vec<Block>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<String>,
    usage: MessageUsage,
}

fn tool_use_id() -> String {
    tool_calls::call_id("toolu_")
}

fn tool_use_block(call: ToolCall) -> Block {
    Block::ToolUse {
        id: tool_use_id(),
        input: serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({})),
        name: call.name,
    }
}

/// Why the message ended, and the stop sequence that ended it. `generated` is the token ids
/// and the text they released: the driver ends the text before the stop, so a stop sequence
/// ended it when the ids' full text goes on with one of `stops` there.
fn stop_reason(
    handle: &ModelHandle,
    finish: Finish,
    calls: usize,
    generated: (&[u32], &str),
    stops: &[String],
) -> (&'static str, Option<String>) {
    match finish {
        Finish::Length => ("max_tokens", None),
        Finish::Stop if calls > 0 => ("tool_use", None),
        Finish::Stop => {
            let (ids, text) = generated;
            let full = handle
                .text()
                .ok()
                .and_then(|t| t.decode(ids).ok())
                .unwrap_or_default();
            let matched = full.get(text.len()..).and_then(|rest| {
                stops
                    .iter()
                    .filter(|s| rest.starts_with(s.as_str()))
                    .max_by_key(|s| s.len())
            });
            match matched {
                Some(s) => ("stop_sequence", Some(s.clone())),
                None => ("end_turn", None),
            }
        }
    }
}

/// The stream: `message_start`, then per content block `content_block_start`,
/// `content_block_delta`s and `content_block_stop` (a `ping` after the first start), then
/// `message_delta` with the stop reason and usage, and `message_stop`.
struct MessageEvents {
    handle: Arc<ModelHandle>,
    shell: Shell,
    answer: Answer,
    stops: Vec<String>,
    /// The ids generated and the text they released, for the stop sequence.
    ids: Vec<u32>,
    text: String,
    /// Content blocks started.
    blocks: usize,
    /// A text block is open (the last one started).
    open_text: bool,
    pinged: bool,
    stop: (&'static str, Option<String>),
}

fn event(name: &'static str, data: Value) -> Frame {
    reply::typed_event(name, data)
}

impl MessageEvents {
    fn start_block(&mut self, frames: &mut Vec<Frame>, block: Value) {
        frames.push(event(
            "content_block_start",
            json!({"index": self.blocks, "content_block": block}),
        ));
        self.blocks += 1;
        if !self.pinged {
            self.pinged = true;
            frames.push(event("ping", json!({})));
        }
    }

    fn stop_block(&mut self, frames: &mut Vec<Frame>) {
        frames.push(event(
            "content_block_stop",
            json!({"index": self.blocks - 1}),
        ));
    }

    fn close_text(&mut self, frames: &mut Vec<Frame>) {
        if self.open_text {
            self.open_text = false;
            self.stop_block(frames);
        }
    }

    fn pieces(&mut self, pieces: Vec<Piece>) -> Vec<Frame> {
        let mut frames = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    if !self.open_text {
                        self.start_block(&mut frames, json!({"type": "text", "text": ""}));
                        self.open_text = true;
                    }
                    frames.push(event(
                        "content_block_delta",
                        json!({"index": self.blocks - 1,
                               "delta": {"type": "text_delta", "text": text}}),
                    ));
                }
                Piece::Call(call) => {
                    self.close_text(&mut frames);
                    let block = json!({"type": "tool_use", "id": tool_use_id(),
                                       "name": call.name, "input": {}});
                    self.start_block(&mut frames, block);
                    frames.push(event(
                        "content_block_delta",
                        json!({"index": self.blocks - 1,
                               "delta": {"type": "input_json_delta",
                                         "partial_json": call.arguments}}),
                    ));
                    self.stop_block(&mut frames);
                }
            }
        }
        frames
    }
}

impl Chunks for MessageEvents {
    fn opening(&mut self) -> Vec<Frame> {
        let message = Message {
            id: self.shell.id.clone(),
            kind: "message",
            role: "assistant",
            model: self.shell.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: MessageUsage {
                input_tokens: self.shell.input_tokens,
                output_tokens: 0,
            },
        };
        vec![event(
            "message_start",
            json!({"message": serde_json::to_value(message).unwrap_or(Value::Null)}),
        )]
    }

    fn token(
        &mut self,
        _choice: usize,
        id: u32,
        text: &str,
        _logprob: Option<&TokenLogprob>,
    ) -> Vec<Frame> {
        self.ids.push(id);
        self.text.push_str(text);
        let pieces = self.answer.token(id, text);
        self.pieces(pieces)
    }

    fn done(&mut self, _choice: usize, text: &str, finish: Finish) -> Vec<Frame> {
        self.text.push_str(text);
        let pieces = self.answer.end(text);
        let mut frames = self.pieces(pieces);
        if self.blocks == 0 {
            self.start_block(&mut frames, json!({"type": "text", "text": ""}));
            self.open_text = true;
        }
        self.close_text(&mut frames);
        self.stop = stop_reason(
            &self.handle,
            finish,
            self.answer.calls(),
            (&self.ids, &self.text),
            &self.stops,
        );
        frames
    }

    fn closing(&mut self, usage: Usage) -> Vec<Frame> {
        let (reason, sequence) = self.stop.clone();
        vec![
            event(
                "message_delta",
                json!({"delta": {"stop_reason": reason, "stop_sequence": sequence},
                       "usage": {"output_tokens": usage.completion_tokens}}),
            ),
            event("message_stop", json!({})),
        ]
    }

    fn failed(&mut self, e: &ApiError) -> Vec<Frame> {
        vec![Frame::Named("error", e.anthropic_body())]
    }

    fn refused(&self, e: ApiError) -> Response {
        e.into_anthropic_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(v: Value) -> MessagesRequest {
        serde_json::from_value(v).expect("a valid request shape")
    }

    #[test]
    fn blocks_become_chat_messages_in_order() {
        let req = request(json!({
            "model": "m", "max_tokens": 8,
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21 C"}]},
                    {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}]
        }));
        let c = conversation(&req).expect("valid");
        assert_eq!(
            c.messages,
            json!([
                {"role": "system", "content": "Be brief.\nBe kind."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "toolu_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "21 C"},
                {"role": "user", "content": "And tomorrow?"}
            ])
        );
        assert_eq!(
            c.tools,
            Some(json!([{"type": "function", "function": {
                "name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}}]))
        );
    }

    #[test]
    fn bad_blocks_are_refused_naming_them() {
        for (content, says) in [
            (
                json!([{"type": "video", "url": "x"}]),
                "unknown content block type `video`",
            ),
            (
                json!([{"type": "image", "source": {}}]),
                "`image` are not supported",
            ),
            (
                json!([{"type": "thinking", "thinking": "x"}]),
                "no extended thinking",
            ),
            (json!([{"text": "no type"}]), "needs a string `type`"),
            (json!([{"type": "text"}]), "needs a string `text`"),
            (json!([{"type": "tool_result"}]), "tool_use_id"),
            (json!(3), "must be a string or an array"),
        ] {
            let req =
                request(json!({"model": "m", "messages": [{"role": "user", "content": content}]}));
            let e = conversation(&req).expect_err("refused");
            assert_eq!(e.status, 400);
            assert!(e.message.contains(says), "{}: {says}", e.message);
            assert_eq!(e.anthropic_body()["error"]["type"], "invalid_request_error");
        }
        let req = request(json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}));
        assert!(conversation(&req).is_err());
        let req = request(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                 "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        );
        let e = conversation(&req).expect_err("server tools are refused");
        assert!(e.message.contains("web_search_20250305"), "{}", e.message);
    }

    #[test]
    fn tool_choice_reads_auto_none_and_the_forcing_kinds() {
        assert_eq!(tool_choice(None).expect("default"), (ToolUse::Auto, None));
        assert_eq!(
            tool_choice(Some(&json!({"type": "none"}))).expect("none"),
            (ToolUse::None, None)
        );
        assert_eq!(
            tool_choice(Some(&json!({"type": "any"}))).expect("any"),
            (ToolUse::Auto, Some(Forced::Any { parallel: true }))
        );
        assert_eq!(
            tool_choice(Some(
                &json!({"type": "any", "disable_parallel_tool_use": true})
            ))
            .expect("any, one call"),
            (ToolUse::Auto, Some(Forced::Any { parallel: false }))
        );
        assert_eq!(
            tool_choice(Some(&json!({"type": "tool", "name": "f"}))).expect("tool"),
            (ToolUse::Auto, Some(Forced::Named("f".into())))
        );
        let e = tool_choice(Some(&json!({"type": "tool"}))).expect_err("no name");
        assert!(e.message.contains("name"), "{}", e.message);
    }

    #[test]
    fn a_tool_call_streams_as_its_own_block_after_the_text() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat");
        let registry = poot_models::Registry::builtin().expect("registry");
        let handle = Arc::new(
            ModelHandle::load(&dir, &registry, &poot_llm::LoadOptions::default())
                .expect("fixture loads"),
        );
        let syntax = tool_calls::ToolSyntax::plain(tool_calls::ToolFormat::Hermes);
        let mut events = MessageEvents {
            handle: Arc::clone(&handle),
            shell: Shell {
                id: "msg_1".into(),
                model: "tiny-chat".into(),
                input_tokens: 7,
            },
            answer: Answer::with_tools(&syntax, vec!["get_weather".into()]),
            stops: Vec::new(),
            ids: Vec::new(),
            text: String::new(),
            blocks: 0,
            open_text: false,
            pinged: false,
            stop: ("end_turn", None),
        };
        let mut frames = events.opening();
        frames.extend(events.token(0, 5, "Let me look.", None));
        frames.extend(events.token(
            0,
            6,
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
            None,
        ));
        frames.extend(events.done(0, "", Finish::Stop));
        frames.extend(events.closing(Usage {
            prompt_tokens: 7,
            completion_tokens: 2,
            total_tokens: 9,
        }));
        let names: Vec<&str> = frames
            .iter()
            .map(|f| match f {
                Frame::Named(n, v) => {
                    assert_eq!(v["type"], *n);
                    *n
                }
                other => panic!("an unnamed frame: {other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let data = |i: usize| match &frames[i] {
            Frame::Named(_, v) => v.clone(),
            _ => Value::Null,
        };
        assert_eq!(data(0)["message"]["usage"]["input_tokens"], 7);
        assert_eq!(data(3)["delta"]["text"], "Let me look.");
        assert_eq!(data(5)["index"], 1);
        assert_eq!(data(5)["content_block"]["type"], "tool_use");
        assert_eq!(data(5)["content_block"]["name"], "get_weather");
        assert!(
            data(5)["content_block"]["id"]
                .as_str()
                .expect("id")
                .starts_with("toolu_")
        );
        let args: Value =
            serde_json::from_str(data(6)["delta"]["partial_json"].as_str().expect("json"))
                .expect("JSON");
        assert_eq!(args, json!({"city": "Paris"}));
        assert_eq!(data(8)["delta"]["stop_reason"], "tool_use");
        assert_eq!(data(8)["usage"]["output_tokens"], 2);
    }
}
