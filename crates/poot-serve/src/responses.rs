//! POST /v1/responses: OpenAI's Responses API, stateless. The `input` (a string, or message,
//! `function_call` and `function_call_output` items) and the `instructions` become a
//! [`Conversation`], function tools become chat tools, and the request goes through the chat
//! path as a chat completion does; the answer comes back as `message` and `function_call`
//! output items, whole or as the Responses stream of events (`response.created` ...
//! `response.completed`, each with its `sequence_number`).
//!
//! Nothing is stored: `previous_response_id`, `conversation` and `background` are refused with a
//! 400 that says so (send the whole conversation in `input`), and `store: true` is accepted and
//! reported as `store: false`. Hosted tools (web search, file search, ...), images and files in
//! the input, structured output formats and forcing a tool are refused too.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::TokenLogprob;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::chat::{self, Conversation, ToolUse};
use crate::engine::Finish;
use crate::error::ApiError;
use crate::guided;
use crate::http::{App, parse, unix_now};
use crate::openai::{SamplingFields, Usage};
use crate::params;
use crate::reply::{self, Chunks, Frame};
use crate::tool_calls::{self, Answer, Piece, ToolCall};

/// A Responses request. Fields the server does not read (`store`, `reasoning`, `truncation`,
/// `include`, `service_tier`, ...) are ignored.
#[derive(Clone, Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Value,
    pub instructions: Option<String>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    #[serde(default)]
    pub stream: bool,
    pub previous_response_id: Option<String>,
    /// Extension: `false` decodes this request one token a step when the server speculates.
    pub speculative: Option<bool>,
    pub conversation: Option<Value>,
    #[serde(default)]
    pub background: bool,
    pub prompt: Option<Value>,
    pub text: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub metadata: Option<Value>,
    pub user: Option<String>,
}

pub async fn responses(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A 400 for what a stateless server cannot do.
fn stateless(param: &str, what: &str) -> ApiError {
    ApiError {
        code: Some("unsupported_parameter"),
        ..ApiError::invalid(
            format!(
                "{param}: {what} is not supported: this server stores no responses; send the whole conversation in `input`"
            ),
            Some(param),
        )
    }
}

async fn run(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ResponsesRequest = parse(body)?;
    app.check_generation_model(&req.model)?;
    if req.previous_response_id.is_some() {
        return Err(stateless(
            "previous_response_id",
            "continuing a stored response",
        ));
    }
    if req.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(stateless("conversation", "a stored conversation"));
    }
    if req.background {
        return Err(stateless("background", "running in the background"));
    }
    if req.prompt.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(stateless("prompt", "a stored prompt template"));
    }
    let mut found = Vec::new();
    if let Some(format) = req.text.as_ref().and_then(|t| t.get("format"))
        && let Some(c) = guided::from_response_format(format, "text.format")?
    {
        found.push((c, "text.format"));
    }
    let (tool_use, mut forced) = guided::openai_tool_choice(req.tool_choice.as_ref())?;
    if let Some(guided::Forced::Any { parallel }) = &mut forced {
        *parallel = req.parallel_tool_calls.unwrap_or(true);
    }
    let max_tokens = params::max_tokens(req.max_output_tokens, "max_output_tokens")?;
    let fields = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        speculative: req.speculative,
        ..SamplingFields::default()
    };
    let mut g = params::generation(&fields, app.handle.config().vocab_size)?;
    g.lora = app.lora_for(&req.model);
    let conversation = conversation(&req)?;
    if let Some(forced) = &forced {
        found.push((
            guided::forced_call(app, conversation.tools.as_ref(), forced, "tool_choice")?,
            "tool_choice",
        ));
    }
    g.guide = guided::resolve(app, found)?;
    let prompt = chat::render(app, conversation)?;
    let rx = chat::submit(app, &prompt, &g, max_tokens, None)?;
    let answer = chat::answer(app, &prompt, tool_use);
    let shell = Shell {
        id: format!(
            "resp_{:016x}{:08x}",
            params::fresh_seed(),
            params::fresh_seed() as u32
        ),
        created_at: unix_now(),
        model: app.model_id.clone(),
        instructions: req.instructions.clone(),
        max_output_tokens: max_tokens,
        temperature: g.sampler.temperature,
        top_p: g.sampler.top_p,
        tool_choice: if forced.is_some() {
            "required"
        } else if tool_use == ToolUse::Auto {
            "auto"
        } else {
            "none"
        },
        tools: req.tools.clone().unwrap_or_else(|| json!([])),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        metadata: req.metadata.clone().unwrap_or_else(|| json!({})),
        user: req.user.clone(),
    };
    if g.stream {
        let events = ResponseEvents {
            shell,
            answer,
            sequence: 0,
            items: Vec::new(),
            message: None,
            finish: Finish::Stop,
        };
        return Ok(reply::stream(rx, events, 1, prompt.ids.len()).await);
    }
    let (outs, completion_tokens) = reply::collect(rx, 1).await?;
    let out = outs
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::engine("the engine answered no choice"))?;
    let finish = out.finish.unwrap_or(Finish::Length);
    let mut items = Vec::new();
    for piece in answer.whole(&out) {
        items.push(match piece {
            Piece::Text(text) => message_item(&message_id(), &text, item_status(finish)),
            Piece::Call(call) => shell.call_item(call, "completed").0,
        });
    }
    if items.is_empty() {
        items.push(message_item(&message_id(), "", item_status(finish)));
    }
    let mut usage = Usage::default();
    usage.add(prompt.ids.len(), completion_tokens);
    Ok(axum::Json(shell.body(finish, items, Some(usage))).into_response())
}

/// The request as a chat conversation: the instructions as its system message, then the input.
fn conversation(req: &ResponsesRequest) -> Result<Conversation, ApiError> {
    let mut messages: Vec<Value> = match &req.input {
        Value::String(s) => vec![json!({"role": "user", "content": s})],
        Value::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                input_item(item, &format!("input[{i}]"), &mut out)?;
            }
            out
        }
        _ => {
            return Err(ApiError::invalid_value(
                "input",
                "input must be a string or an array of items",
            ));
        }
    };
    if messages.is_empty() {
        return Err(ApiError::invalid_value("input", "input is empty"));
    }
    if let Some(instructions) = req.instructions.as_ref().filter(|i| !i.is_empty()) {
        // Templates take one system message, first: the instructions join the input's own.
        match messages.first_mut() {
            Some(first) if first["role"] == "system" => {
                let own = first["content"].as_str().unwrap_or_default();
                first["content"] = Value::String(format!("{instructions}\n\n{own}"));
            }
            _ => messages.insert(0, json!({"role": "system", "content": instructions})),
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
        Some(_) => return Err(ApiError::invalid_value("tools", "tools must be an array")),
    };
    Ok(Conversation {
        messages: Value::Array(messages),
        tools,
    })
}

fn bad(at: &str, why: &str) -> ApiError {
    ApiError::invalid(format!("{at}: {why}"), Some(at))
}

fn string<'a>(item: &'a Value, key: &str, at: &str) -> Result<&'a str, ApiError> {
    item.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(at, &format!("needs a string `{key}`")))
}

/// One input item, appended to the chat messages.
fn input_item(item: &Value, at: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let kind = match item.get("type").and_then(Value::as_str) {
        Some(k) => k,
        None if item.get("role").is_some() => "message",
        None => return Err(bad(at, "an input item needs a string `type` or a `role`")),
    };
    match kind {
        "message" => {
            let role = match string(item, "role", at)? {
                "developer" | "system" => "system",
                r @ ("user" | "assistant") => r,
                r => {
                    return Err(bad(
                        at,
                        &format!(
                            "unknown role `{r}` (expected user, assistant, system or developer)"
                        ),
                    ));
                }
            };
            let content = match item.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(parts, &format!("{at}.content"))?,
                _ => return Err(bad(at, "content must be a string or an array of parts")),
            };
            out.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let (call_id, name) = (string(item, "call_id", at)?, string(item, "name", at)?);
            let arguments = string(item, "arguments", at)?;
            // Templates print an arguments object; one that is not JSON stays the string.
            let arguments = serde_json::from_str::<Value>(arguments)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| Value::String(arguments.to_owned()));
            let call = json!({"id": call_id, "type": "function",
                              "function": {"name": name, "arguments": arguments}});
            // Calls in a row, or after the assistant's text, are one assistant turn.
            match out.last_mut() {
                Some(last) if last["role"] == "assistant" => match last.get_mut("tool_calls") {
                    Some(Value::Array(calls)) => calls.push(call),
                    _ => last["tool_calls"] = json!([call]),
                },
                _ => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let call_id = string(item, "call_id", at)?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(parts, &format!("{at}.output"))?,
                _ => return Err(bad(at, "output must be a string or an array of parts")),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        "item_reference" => {
            return Err(stateless(at, "an `item_reference` to a stored item"));
        }
        other => {
            return Err(bad(
                at,
                &format!(
                    "input items of type `{other}` are not supported (message, function_call and function_call_output are)"
                ),
            ));
        }
    }
    Ok(())
}

/// Text content parts (`input_text`, `output_text`) joined.
fn text_parts(parts: &[Value], at: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => text.push_str(string(p, "text", &at)?),
            Some("refusal") => text.push_str(string(p, "refusal", &at)?),
            Some(k @ ("input_image" | "input_file" | "input_audio")) => {
                return Err(bad(
                    &at,
                    &format!(
                        "content parts of type `{k}` are not supported: this server's models read text only"
                    ),
                ));
            }
            Some(k) => return Err(bad(&at, &format!("unknown content part type `{k}`"))),
            None => return Err(bad(&at, "a content part needs a string `type`")),
        }
    }
    Ok(text)
}

/// A Responses function tool (flat: `type`, `name`, `description`, `parameters`) as a chat one.
fn function_tool(tool: &Value, i: usize) -> Result<Value, ApiError> {
    let at = format!("tools[{i}]");
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(k) => {
            return Err(bad(
                &at,
                &format!(
                    "tools of type `{k}` are not supported: this server runs function tools only"
                ),
            ));
        }
        None => return Err(bad(&at, "a tool needs a string `type`")),
    }
    let name = string(tool, "name", &at)?;
    let mut function = json!({"name": name});
    if let Some(d) = tool.get("description").filter(|d| !d.is_null()) {
        function["description"] = d.clone();
    }
    if let Some(p) = tool.get("parameters").filter(|p| !p.is_null()) {
        function["parameters"] = p.clone();
    }
    Ok(json!({"type": "function", "function": function}))
}

fn message_id() -> String {
    format!("msg_{:016x}", params::fresh_seed())
}

fn item_status(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "incomplete",
        Finish::Stop => "completed",
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [output_text(text)]})
}

/// What the response object repeats of its request, and how it is built.
struct Shell {
    id: String,
    created_at: u64,
    model: String,
    instructions: Option<String>,
    max_output_tokens: Option<usize>,
    temperature: f32,
    top_p: f32,
    tool_choice: &'static str,
    tools: Value,
    parallel_tool_calls: bool,
    metadata: Value,
    user: Option<String>,
}

impl Shell {
    /// The response object; `finish` none while it is in progress.
    fn body_with(
        &self,
        status: &str,
        incomplete: Option<Value>,
        output: Vec<Value>,
        usage: Option<Usage>,
    ) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": self.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "top_p": self.top_p,
            "truncation": "disabled",
            "usage": usage.map(|u| json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.total_tokens,
            })),
            "user": self.user,
            "metadata": self.metadata,
        })
    }

    /// The finished response: `incomplete` when the token limit cut it.
    fn body(&self, finish: Finish, output: Vec<Value>, usage: Option<Usage>) -> Value {
        match finish {
            Finish::Length => self.body_with(
                "incomplete",
                Some(json!({"reason": "max_output_tokens"})),
                output,
                usage,
            ),
            Finish::Stop => self.body_with("completed", None, output, usage),
        }
    }

    /// A `function_call` item and its id.
    fn call_item(&self, call: ToolCall, status: &str) -> (Value, String) {
        let id = format!("fc_{:016x}", params::fresh_seed());
        let item = json!({"type": "function_call", "id": id,
                          "call_id": tool_calls::call_id("call_"),
                          "name": call.name, "arguments": call.arguments, "status": status});
        (item, id)
    }
}

/// The stream of a response's events.
struct ResponseEvents {
    shell: Shell,
    answer: Answer,
    sequence: u64,
    /// Output items done.
    items: Vec<Value>,
    /// The message item being written: its id and text so far.
    message: Option<(String, String)>,
    finish: Finish,
}

impl ResponseEvents {
    fn event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        reply::typed_event(name, data)
    }

    fn open_message(&mut self, frames: &mut Vec<Frame>) {
        if self.message.is_some() {
            return;
        }
        let id = message_id();
        let at = self.items.len();
        let item = json!({"type": "message", "id": id, "status": "in_progress",
                          "role": "assistant", "content": []});
        frames.push(self.event(
            "response.output_item.added",
            json!({"output_index": at, "item": item}),
        ));
        frames.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": at, "content_index": 0,
                   "part": output_text("")}),
        ));
        self.message = Some((id, String::new()));
    }

    fn close_message(&mut self, frames: &mut Vec<Frame>, status: &str) {
        let Some((id, text)) = self.message.take() else {
            return;
        };
        let at = self.items.len();
        frames.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "text": text,
                   "logprobs": []}),
        ));
        frames.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": at, "content_index": 0,
                   "part": output_text(&text)}),
        ));
        let item = message_item(&id, &text, status);
        frames.push(self.event(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        ));
        self.items.push(item);
    }

    fn pieces(&mut self, pieces: Vec<Piece>) -> Vec<Frame> {
        let mut frames = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Text(delta) => {
                    self.open_message(&mut frames);
                    let id = match &mut self.message {
                        Some((id, text)) => {
                            text.push_str(&delta);
                            id.clone()
                        }
                        None => continue,
                    };
                    let at = self.items.len();
                    frames.push(self.event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": at, "content_index": 0,
                               "delta": delta, "logprobs": []}),
                    ));
                }
                Piece::Call(call) => {
                    self.close_message(&mut frames, "completed");
                    let at = self.items.len();
                    let arguments = call.arguments.clone();
                    let name = call.name.clone();
                    let (mut item, id) = self.shell.call_item(call, "in_progress");
                    item["arguments"] = json!("");
                    frames.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": at, "item": item}),
                    ));
                    frames.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": at, "delta": arguments}),
                    ));
                    frames.push(self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": id, "output_index": at, "name": name,
                               "arguments": arguments}),
                    ));
                    item["arguments"] = json!(arguments);
                    item["status"] = json!("completed");
                    frames.push(self.event(
                        "response.output_item.done",
                        json!({"output_index": at, "item": item}),
                    ));
                    self.items.push(item);
                }
            }
        }
        frames
    }
}

impl Chunks for ResponseEvents {
    fn opening(&mut self) -> Vec<Frame> {
        let body = self.shell.body_with("in_progress", None, Vec::new(), None);
        vec![
            self.event("response.created", json!({"response": body})),
            self.event("response.in_progress", json!({"response": body})),
        ]
    }

    fn token(
        &mut self,
        _choice: usize,
        id: u32,
        text: &str,
        _logprob: Option<&TokenLogprob>,
    ) -> Vec<Frame> {
        let pieces = self.answer.token(id, text);
        self.pieces(pieces)
    }

    fn done(&mut self, _choice: usize, text: &str, finish: Finish) -> Vec<Frame> {
        self.finish = finish;
        let pieces = self.answer.end(text);
        let mut frames = self.pieces(pieces);
        if self.items.is_empty() {
            self.open_message(&mut frames);
        }
        self.close_message(&mut frames, item_status(finish));
        frames
    }

    fn closing(&mut self, usage: Usage) -> Vec<Frame> {
        let body = self
            .shell
            .body(self.finish, std::mem::take(&mut self.items), Some(usage));
        let name = match self.finish {
            Finish::Length => "response.incomplete",
            Finish::Stop => "response.completed",
        };
        vec![self.event(name, json!({"response": body}))]
    }

    fn failed(&mut self, e: &ApiError) -> Vec<Frame> {
        vec![self.event(
            "error",
            json!({"code": e.code, "message": e.message, "param": e.param}),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(v: Value) -> ResponsesRequest {
        serde_json::from_value(v).expect("a valid request shape")
    }

    #[test]
    fn input_items_become_chat_messages() {
        let req = request(json!({
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "not json"},
                {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "?"}]}
            ],
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather.",
                       "parameters": {"type": "object"}, "strict": true}]
        }));
        let c = conversation(&req).expect("valid");
        assert_eq!(
            c.messages,
            json!([
                {"role": "system", "content": "Be brief.\n\nUse tools."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "get_weather", "arguments": "not json"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "?"}
            ])
        );
        assert_eq!(
            c.tools,
            Some(json!([{"type": "function", "function": {
                "name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}}]))
        );
        let c = conversation(&request(
            json!({"model": "m", "input": "Hi", "instructions": "Sys"}),
        ))
        .expect("valid");
        assert_eq!(
            c.messages,
            json!([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}])
        );
    }

    #[test]
    fn unsupported_input_is_refused_naming_it() {
        for (input, says) in [
            (
                json!([{"type": "item_reference", "id": "x"}]),
                "stores no responses",
            ),
            (
                json!([{"type": "reasoning", "summary": []}]),
                "`reasoning` are not supported",
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
                "`input_image` are not supported",
            ),
            (json!([{"role": "wizard", "content": "x"}]), "unknown role"),
            (json!([{"content": "x"}]), "needs a string `type`"),
            (json!([]), "input is empty"),
            (json!(7), "a string or an array"),
        ] {
            let e = conversation(&request(json!({"model": "m", "input": input}))).expect_err(says);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(says), "{}: {says}", e.message);
        }
        let req = request(json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}));
        let e = conversation(&req).expect_err("hosted tools are refused");
        assert!(e.message.contains("`web_search`"), "{}", e.message);
    }

    fn shell() -> Shell {
        Shell {
            id: "resp_1".into(),
            created_at: 0,
            model: "m".into(),
            instructions: None,
            max_output_tokens: Some(8),
            temperature: 1.0,
            top_p: 1.0,
            tool_choice: "auto",
            tools: json!([]),
            parallel_tool_calls: true,
            metadata: json!({}),
            user: None,
        }
    }

    #[test]
    fn streamed_events_are_numbered_and_build_the_items() {
        let syntax = tool_calls::ToolSyntax::plain(tool_calls::ToolFormat::Hermes);
        let mut events = ResponseEvents {
            shell: shell(),
            answer: Answer::with_tools(&syntax, vec!["get_time".into()]),
            sequence: 0,
            items: Vec::new(),
            message: None,
            finish: Finish::Stop,
        };
        let mut frames = events.opening();
        frames.extend(events.token(0, 1, "It is", None));
        frames.extend(events.token(0, 2, " late.", None));
        frames.extend(events.token(
            0,
            3,
            "<tool_call>{\"name\": \"get_time\"}</tool_call>",
            None,
        ));
        frames.extend(events.done(0, "", Finish::Stop));
        frames.extend(events.closing(Usage {
            prompt_tokens: 3,
            completion_tokens: 3,
            total_tokens: 6,
        }));
        let named: Vec<(&str, &Value)> = frames
            .iter()
            .map(|f| match f {
                Frame::Named(n, v) => (*n, v),
                other => panic!("an unnamed frame: {other:?}"),
            })
            .collect();
        let names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (i, (name, v)) in named.iter().enumerate() {
            assert_eq!(v["sequence_number"], i, "{name}");
            assert_eq!(v["type"], *name);
        }
        assert_eq!(named[6].1["text"], "It is late.");
        let done = &named[13].1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["usage"]["total_tokens"], 6);
        let output = done["output"].as_array().expect("output");
        assert_eq!(output.len(), 2);
        assert_eq!(output[0]["content"][0]["text"], "It is late.");
        assert_eq!(output[1]["type"], "function_call");
        assert_eq!(output[1]["name"], "get_time");
        assert_eq!(output[1]["arguments"], "{}");
        assert!(
            output[1]["call_id"]
                .as_str()
                .expect("call id")
                .starts_with("call_")
        );
        assert_eq!(named[9].1["item"]["id"], output[1]["id"]);
    }

    #[test]
    fn a_cut_off_answer_is_incomplete() {
        let mut events = ResponseEvents {
            shell: shell(),
            answer: Answer::plain(),
            sequence: 0,
            items: Vec::new(),
            message: None,
            finish: Finish::Stop,
        };
        let mut frames = events.done(0, "", Finish::Length);
        frames.extend(events.closing(Usage::default()));
        let Some(Frame::Named(name, last)) = frames.last() else {
            panic!("no closing event");
        };
        assert_eq!(*name, "response.incomplete");
        assert_eq!(last["response"]["status"], "incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        // An empty answer is still one (empty) message.
        assert_eq!(last["response"]["output"][0]["content"][0]["text"], "");
        assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    }
}
