//! Tool calls out of generated text. A model that was shown tools answers a call in its chat
//! format's own syntax; this module finds those calls in the text as it streams and hands back
//! plain text and calls, so the routes can answer with OpenAI `tool_calls`, Anthropic
//! `tool_use` blocks or Responses `function_call` items.
//!
//! The syntax is chosen from the model's chat templates (what they write for an assistant's
//! call is what the model was trained to emit):
//!
//! - [`ToolFormat::Hermes`] (Qwen 2.5 and 3, Hermes, SmolLM3): `<tool_call>{"name": ...,
//!   "arguments": {...}}</tool_call>`, anywhere in the answer, several for parallel calls; the
//!   text around them is content.
//! - [`ToolFormat::Llama3Json`] (Llama 3.1 to 3.3): the answer is a JSON object `{"name": ...,
//!   "parameters": {...}}` (several separated by `;`), or such calls after `<|python_tag|>`
//!   with content before it.
//! - [`ToolFormat::Mistral`]: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}`
//!   objects, or the newer `[TOOL_CALLS]name[ARGS]{...}` segments; content before it.
//! - [`ToolFormat::Generic`], for a template that shows no call syntax (as llama.cpp's generic
//!   handler does): the tools and the answer's form are described in a system message, and a
//!   call is an answer that is one JSON object `{"tool_calls": [{"name": ..., "arguments":
//!   {...}}]}`.
//!
//! A call must be well-formed JSON naming one of the request's tools, with an object of
//! arguments; anything else (malformed JSON, an unknown tool, a call cut off by the token
//! limit) stays text, with its markers, so nothing the model wrote is lost. While streaming,
//! text that could still become a call is held back until it is settled.

use std::borrow::Cow;

use poot_text::Tokenizer;
use serde_json::{Map, Value};

/// The call syntax of a chat format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{...}</tool_call>` blocks.
    Hermes,
    /// A bare JSON call (or calls after `<|python_tag|>`), Llama 3.x style.
    Llama3Json,
    /// `[TOOL_CALLS]` and a JSON array, or `[TOOL_CALLS]name[ARGS]{...}`.
    Mistral,
    /// No syntax in the template: the answer is `{"tool_calls": [...]}` as a system message
    /// describes it.
    Generic,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";
/// The key of a generic answer's calls.
const GENERIC_CALLS: &str = "tool_calls";

impl ToolFormat {
    /// The format whose call syntax one of `templates` writes, or none: a template that shows
    /// no call syntax gives the model none to follow, and its answers stay text.
    pub fn detect<'a>(templates: impl IntoIterator<Item = &'a str> + Clone) -> Option<ToolFormat> {
        let any = |f: &dyn Fn(&str) -> bool| templates.clone().into_iter().any(f);
        if any(&|t| t.contains(HERMES_OPEN)) {
            Some(ToolFormat::Hermes)
        } else if any(&|t| t.contains(MISTRAL_CALLS)) {
            Some(ToolFormat::Mistral)
        } else if any(&|t| {
            t.contains(PYTHON_TAG) || (t.contains("<|start_header_id|>") && t.contains("tools"))
        }) {
            Some(ToolFormat::Llama3Json)
        } else {
            None
        }
    }

    /// The marker spellings this format's calls use.
    fn markers(self) -> &'static [&'static str] {
        match self {
            ToolFormat::Hermes => &[HERMES_OPEN, HERMES_CLOSE],
            ToolFormat::Llama3Json => &[PYTHON_TAG],
            ToolFormat::Mistral => &[MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID],
            ToolFormat::Generic => &[],
        }
    }

    /// Whether a call's ids must be 9 letters and digits (Mistral's templates refuse others).
    pub fn short_ids(self) -> bool {
        self == ToolFormat::Mistral
    }
}

/// A model's call syntax: the format, and which of its markers are control tokens. Generated
/// text leaves control tokens out (`<|python_tag|>`, `[TOOL_CALLS]`), so the parser is told
/// where they were from the token ids.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSyntax {
    pub format: ToolFormat,
    /// Control-token ids of the format's markers, and their spelling.
    controls: Vec<(u32, &'static str)>,
}

impl ToolSyntax {
    /// The syntax of a model whose chat templates are `templates`, with `tokenizer`'s ids.
    pub fn detect<'a>(
        templates: impl IntoIterator<Item = &'a str> + Clone,
        tokenizer: &Tokenizer,
    ) -> Option<ToolSyntax> {
        let format = ToolFormat::detect(templates)?;
        let controls = format
            .markers()
            .iter()
            .filter_map(|&m| {
                let id = tokenizer.token_id(m)?;
                tokenizer.is_control(id).then_some((id, m))
            })
            .collect();
        Some(ToolSyntax { format, controls })
    }

    /// The syntax for a model whose templates show none ([`ToolFormat::Generic`]).
    pub fn generic() -> ToolSyntax {
        ToolSyntax {
            format: ToolFormat::Generic,
            controls: Vec::new(),
        }
    }

    /// A Lark grammar (llguidance's dialect) whose every sentence is a call in this syntax to
    /// one of `tools` (each a name and its parameters' JSON schema): one call, or with
    /// `several` one or more. What the answer parser reads back as `tool_calls`.
    pub fn forced_grammar(&self, tools: &[(String, Value)], several: bool) -> String {
        let args_key = match self.format {
            ToolFormat::Llama3Json => "parameters",
            ToolFormat::Hermes | ToolFormat::Mistral | ToolFormat::Generic => "arguments",
        };
        let calls: Vec<Value> = tools
            .iter()
            .map(|(name, params)| {
                serde_json::json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, args_key: params},
                    "required": ["name", args_key],
                    "additionalProperties": false,
                })
            })
            .collect();
        let mut schema = match <[Value; 1]>::try_from(calls) {
            Ok([one]) => one,
            Err(calls) => serde_json::json!({"anyOf": calls}),
        };
        if self.format == ToolFormat::Generic {
            let mut list = serde_json::json!({"type": "array", "items": schema, "minItems": 1});
            if !several {
                list["maxItems"] = Value::from(1);
            }
            schema = serde_json::json!({
                "type": "object",
                "properties": {GENERIC_CALLS: list},
                "required": [GENERIC_CALLS],
                "additionalProperties": false,
            });
        }
        // Calls as the chat templates write them (`tojson`, Python's `json.dumps` spacing): the
        // form the model was trained on, and no room to wander in whitespace.
        schema["x-guidance"] = serde_json::json!({
            "whitespace_flexible": false,
            "item_separator": ", ",
            "key_separator": ": ",
        });
        let json = format!("%json {schema}");
        // A control-token marker by id; a text marker as a string literal.
        let marker = |m: &str| match self.controls.iter().find(|(_, c)| *c == m) {
            Some((id, _)) => format!("<[{id}]>"),
            None => Value::from(m).to_string(),
        };
        let (call, sep) = match self.format {
            ToolFormat::Hermes => (
                format!(
                    "{} \"\\n\" call_json \"\\n\" {}",
                    marker(HERMES_OPEN),
                    marker(HERMES_CLOSE)
                ),
                "\"\\n\"",
            ),
            ToolFormat::Llama3Json => ("call_json".to_string(), "\"; \""),
            ToolFormat::Mistral => ("call_json".to_string(), "\", \""),
            ToolFormat::Generic => ("call_json".to_string(), ""),
        };
        // A generic answer's one object holds every call.
        let calls = if several && self.format != ToolFormat::Generic {
            format!("call ({sep} call)*")
        } else {
            "call".to_string()
        };
        let start = match self.format {
            ToolFormat::Mistral => format!("{} \"[\" {calls} \"]\"", marker(MISTRAL_CALLS)),
            ToolFormat::Hermes | ToolFormat::Llama3Json | ToolFormat::Generic => calls,
        };
        format!("start: {start}\ncall: {call}\ncall_json: {json}\n")
    }

    /// A syntax whose markers are all plain text.
    #[cfg(test)]
    pub fn plain(format: ToolFormat) -> ToolSyntax {
        ToolSyntax {
            format,
            controls: Vec::new(),
        }
    }

    /// The text a generated token stands for in call syntax: its released `text`, then the
    /// marker when the token is a control-token marker (whose text the decoder leaves out; what
    /// the token released was written before it).
    pub fn text<'t>(&self, id: u32, text: &'t str) -> Cow<'t, str> {
        match self.controls.iter().find(|(c, _)| *c == id) {
            Some((_, marker)) => Cow::Owned(format!("{text}{marker}")),
            None => Cow::Borrowed(text),
        }
    }
}

/// A conversation as a template without call syntax can render it ([`ToolFormat::Generic`]):
/// the offered `tools` and the form of a call described in a system message (ahead of the
/// conversation's own system text), earlier calls written into their assistant messages as the
/// model would answer them, and tool results as user messages.
pub fn generic_conversation(messages: Value, tools: Option<&Value>) -> Value {
    let Value::Array(list) = messages else {
        return messages;
    };
    let mut out: Vec<Value> = Vec::with_capacity(list.len() + 1);
    let offered: Vec<&Value> = tools
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| t.get("function").unwrap_or(t))
        .collect();
    if !offered.is_empty() {
        let listed: Vec<String> = offered.iter().map(|t| t.to_string()).collect();
        let mut text = format!(
            "You can call these tools:\n{}\n\nTo call tools, answer with only a JSON object of \
             this form and nothing else: {{\"{GENERIC_CALLS}\": [{{\"name\": \"<a tool's name>\", \
             \"arguments\": {{<its arguments>}}}}]}}. Otherwise answer the user directly.",
            listed.join("\n")
        );
        let own_system = list.first().filter(|m| m["role"] == "system");
        if let Some(Value::String(own)) = own_system.map(|m| &m["content"]) {
            text = format!("{own}\n\n{text}");
        }
        out.push(serde_json::json!({"role": "system", "content": text}));
    }
    let skip =
        usize::from(!offered.is_empty() && list.first().is_some_and(|m| m["role"] == "system"));
    for mut m in list.into_iter().skip(skip) {
        match m["role"].as_str() {
            Some("assistant") => {
                if let Some(Value::Array(calls)) =
                    m.as_object_mut().and_then(|o| o.remove("tool_calls"))
                {
                    let calls: Vec<Value> = calls
                        .iter()
                        .map(|c| {
                            let f = c.get("function").unwrap_or(c);
                            let args = match f.get("arguments") {
                                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                                Some(v) => v.clone(),
                                None => Value::Object(Map::new()),
                            };
                            serde_json::json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args})
                        })
                        .collect();
                    let call_text = serde_json::json!({GENERIC_CALLS: calls}).to_string();
                    let content = match m["content"].as_str() {
                        Some(t) if !t.is_empty() => format!("{t}\n{call_text}"),
                        _ => call_text,
                    };
                    m["content"] = Value::String(content);
                }
                out.push(m);
            }
            Some("tool") => {
                let mut response = serde_json::json!({"content": m["content"].clone()});
                if let Some(name) = m.get("name") {
                    response["name"] = name.clone();
                }
                let text = serde_json::json!({"tool_response": response}).to_string();
                out.push(serde_json::json!({"role": "user", "content": text}));
            }
            _ => out.push(m),
        }
    }
    Value::Array(out)
}

/// One call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// What the parser releases: text, or a whole call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Call(ToolCall),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// Plain text; a suffix that could start a marker is held.
    Text,
    /// Inside `<tool_call>`, waiting for `</tool_call>`.
    Block,
    /// Everything from here to the end is calls (Llama 3 and Mistral); `marker` is what opened
    /// them (empty for a bare Llama 3 JSON answer).
    Rest { marker: &'static str },
}

/// Finds calls in one answer's text as it arrives.
#[derive(Clone, Debug)]
pub struct ToolParser {
    format: ToolFormat,
    /// The names of the request's tools: a call to another stays text.
    names: Vec<String>,
    mode: Mode,
    /// Text received and not yet released.
    held: String,
    /// Whether anything was released (a bare Llama 3 call must open the answer).
    released_any: bool,
}

impl ToolParser {
    pub fn new(format: ToolFormat, names: Vec<String>) -> ToolParser {
        ToolParser {
            format,
            names,
            mode: Mode::Text,
            held: String::new(),
            released_any: false,
        }
    }

    /// Takes the next piece of text; returns what is settled.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            let progressed = match self.mode.clone() {
                Mode::Text => self.scan_text(&mut out),
                Mode::Block => self.scan_block(&mut out),
                Mode::Rest { .. } => false,
            };
            if !progressed {
                break;
            }
        }
        out
    }

    /// The answer ended: releases what was held, a call that is complete as a call and the
    /// rest as text.
    pub fn finish(&mut self) -> Vec<Piece> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match std::mem::replace(&mut self.mode, Mode::Text) {
            Mode::Text => self.text(&mut out, held),
            Mode::Block => match self.call(&held) {
                // A last call whose closing tag the model left out (it ended its turn).
                Some(call) => self.release_call(&mut out, call),
                None => self.text(&mut out, format!("{HERMES_OPEN}{held}")),
            },
            Mode::Rest { marker } => {
                let calls = match self.format {
                    ToolFormat::Mistral => self.mistral_calls(&held),
                    ToolFormat::Llama3Json | ToolFormat::Hermes => self.json_calls(&held),
                    ToolFormat::Generic => self.generic_calls(&held),
                };
                match calls {
                    Some(calls) => {
                        for call in calls {
                            self.release_call(&mut out, call);
                        }
                    }
                    None => self.text(&mut out, format!("{marker}{held}")),
                }
            }
        }
        out
    }

    fn text(&mut self, out: &mut Vec<Piece>, text: String) {
        if text.is_empty() {
            return;
        }
        self.released_any = true;
        match out.last_mut() {
            Some(Piece::Text(t)) => t.push_str(&text),
            _ => out.push(Piece::Text(text)),
        }
    }

    fn release_call(&mut self, out: &mut Vec<Piece>, call: ToolCall) {
        self.released_any = true;
        out.push(Piece::Call(call));
    }

    /// In text: finds where calls open, releasing the text before; holds a possible marker
    /// start. Returns whether the mode changed.
    fn scan_text(&mut self, out: &mut Vec<Piece>) -> bool {
        let opener = match self.format {
            ToolFormat::Hermes => HERMES_OPEN,
            ToolFormat::Llama3Json => PYTHON_TAG,
            ToolFormat::Mistral => MISTRAL_CALLS,
            ToolFormat::Generic => "",
        };
        let bare_json = matches!(self.format, ToolFormat::Llama3Json | ToolFormat::Generic);
        if bare_json && !self.released_any {
            // A bare JSON call is the whole answer: hold leading blanks, and everything once
            // the answer opens with `{`.
            let trimmed = self.held.trim_start();
            if trimmed.starts_with('{') {
                // The leading blanks stay held: they are text again if the calls are not.
                self.mode = Mode::Rest { marker: "" };
                return true;
            }
            if trimmed.is_empty() || (!opener.is_empty() && opener.starts_with(trimmed)) {
                return false;
            }
        }
        if opener.is_empty() {
            // No marker can open calls later: the rest is text.
            let release = std::mem::take(&mut self.held);
            self.text(out, release);
            return false;
        }
        if let Some(at) = self.held.find(opener) {
            let before: String = self.held.drain(..at).collect();
            self.held.drain(..opener.len());
            self.text(out, before);
            self.mode = match self.format {
                ToolFormat::Hermes => Mode::Block,
                ToolFormat::Llama3Json | ToolFormat::Mistral | ToolFormat::Generic => {
                    Mode::Rest { marker: opener }
                }
            };
            return true;
        }
        let keep = partial_suffix(&self.held, opener);
        let release: String = self.held.drain(..self.held.len() - keep).collect();
        self.text(out, release);
        false
    }

    /// Inside a Hermes block: releases it once closed, as a call or as text.
    fn scan_block(&mut self, out: &mut Vec<Piece>) -> bool {
        let Some(at) = self.held.find(HERMES_CLOSE) else {
            return false;
        };
        let inner: String = self.held.drain(..at).collect();
        self.held.drain(..HERMES_CLOSE.len());
        match self.call(&inner) {
            Some(call) => self.release_call(out, call),
            None => self.text(out, format!("{HERMES_OPEN}{inner}{HERMES_CLOSE}")),
        }
        self.mode = Mode::Text;
        true
    }

    /// One call object as JSON text.
    fn call(&self, json: &str) -> Option<ToolCall> {
        let value: Value = serde_json::from_str(json.trim()).ok()?;
        self.call_value(value)
    }

    /// A call object: a known `name` and an object of `arguments` (or `parameters`, or a
    /// string holding that object; none is an empty object).
    fn call_value(&self, value: Value) -> Option<ToolCall> {
        let Value::Object(mut fields) = value else {
            return None;
        };
        let Some(Value::String(name)) = fields.remove("name") else {
            return None;
        };
        if !self.names.contains(&name) {
            return None;
        }
        let args = fields
            .remove("arguments")
            .or_else(|| fields.remove("parameters"));
        let args = match args {
            None => Value::Object(Map::new()),
            Some(v @ Value::Object(_)) => v,
            Some(Value::String(s)) => match serde_json::from_str(&s).ok()? {
                v @ Value::Object(_) => v,
                _ => return None,
            },
            Some(_) => return None,
        };
        Some(ToolCall {
            name,
            arguments: args.to_string(),
        })
    }

    /// JSON call objects (or arrays of them) separated by blanks or `;`: all calls or none.
    fn json_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        let mut calls = Vec::new();
        let mut rest = text;
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
            if rest.is_empty() {
                break;
            }
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            let value = values.next()?.ok()?;
            rest = &rest[values.byte_offset()..];
            match value {
                Value::Array(items) => {
                    for item in items {
                        calls.push(self.call_value(item)?);
                    }
                }
                other => calls.push(self.call_value(other)?),
            }
        }
        (!calls.is_empty()).then_some(calls)
    }

    /// A generic answer: one object whose `tool_calls` is an array of calls (or whose
    /// `tool_call` is one call), and nothing after it but blanks. All calls or none.
    fn generic_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        let Value::Object(mut fields) = serde_json::from_str(text.trim()).ok()? else {
            return None;
        };
        let calls = match (fields.remove(GENERIC_CALLS), fields.remove("tool_call")) {
            (Some(Value::Array(items)), None) if fields.is_empty() => items,
            (None, Some(one @ Value::Object(_))) if fields.is_empty() => vec![one],
            _ => return None,
        };
        let calls: Option<Vec<ToolCall>> = calls.into_iter().map(|c| self.call_value(c)).collect();
        calls.filter(|c| !c.is_empty())
    }

    /// Mistral's calls after `[TOOL_CALLS]`: a JSON array (or objects), or `name[ARGS]{...}`
    /// segments, each further one after another `[TOOL_CALLS]`.
    fn mistral_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        let trimmed = text.trim_start();
        if trimmed.starts_with('[') || trimmed.starts_with('{') {
            return self.json_calls(&trimmed.replace(MISTRAL_CALLS, " "));
        }
        let mut calls = Vec::new();
        for segment in text.split(MISTRAL_CALLS) {
            if segment.trim().is_empty() {
                continue;
            }
            let (head, args) = segment.split_once(MISTRAL_ARGS)?;
            let name = head.split(MISTRAL_CALL_ID).next().unwrap_or(head).trim();
            let args: Value = serde_json::from_str(args.trim()).ok()?;
            let mut fields = Map::new();
            fields.insert("name".to_owned(), Value::String(name.to_owned()));
            fields.insert("arguments".to_owned(), args);
            calls.push(self.call_value(Value::Object(fields))?);
        }
        (!calls.is_empty()).then_some(calls)
    }
}

/// Bytes at the end of `text` that are a proper start of `marker`.
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&k| {
            text.is_char_boundary(text.len() - k)
                && marker.is_char_boundary(k)
                && text.ends_with(&marker[..k])
        })
        .unwrap_or(0)
}

/// One answer's text as it streams: passed through as it comes, or, when the request offered
/// tools, split into text and calls. Text of only blanks is held until what follows settles
/// it, and dropped when calls were made (the blanks between and around calls).
#[derive(Clone, Debug)]
pub struct Answer {
    finder: Option<(ToolSyntax, ToolParser)>,
    blank: String,
    calls: usize,
}

impl Answer {
    /// An answer whose text is all content.
    pub fn plain() -> Answer {
        Answer {
            finder: None,
            blank: String::new(),
            calls: 0,
        }
    }

    /// An answer that may call the tools named `names`, in `syntax`.
    pub fn with_tools(syntax: &ToolSyntax, names: Vec<String>) -> Answer {
        Answer {
            finder: Some((syntax.clone(), ToolParser::new(syntax.format, names))),
            ..Answer::plain()
        }
    }

    /// Calls found so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// A generated token and the text it released.
    pub fn token(&mut self, id: u32, text: &str) -> Vec<Piece> {
        match &mut self.finder {
            None if text.is_empty() => Vec::new(),
            None => vec![Piece::Text(text.to_owned())],
            Some((syntax, parser)) => {
                let pieces = parser.push(&syntax.text(id, text));
                self.settle(pieces, false)
            }
        }
    }

    /// The answer ended with `tail`, text no token released.
    pub fn end(&mut self, tail: &str) -> Vec<Piece> {
        match &mut self.finder {
            None if tail.is_empty() => Vec::new(),
            None => vec![Piece::Text(tail.to_owned())],
            Some((_, parser)) => {
                let mut pieces = parser.push(tail);
                pieces.extend(parser.finish());
                self.settle(pieces, true)
            }
        }
    }

    /// A whole collected answer, adjacent texts joined.
    pub fn whole(mut self, out: &crate::reply::ChoiceOut) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        let found = out
            .tokens
            .iter()
            .flat_map(|t| self.token(t.id, &t.text))
            .collect::<Vec<_>>();
        for p in found.into_iter().chain(self.end(&out.tail)) {
            match (pieces.last_mut(), p) {
                (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
                (_, p) => pieces.push(p),
            }
        }
        pieces
    }

    fn settle(&mut self, pieces: Vec<Piece>, end: bool) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Text(t) if t.trim().is_empty() => self.blank.push_str(&t),
                Piece::Text(t) => out.push(Piece::Text(std::mem::take(&mut self.blank) + &t)),
                Piece::Call(c) => {
                    self.blank.clear();
                    self.calls += 1;
                    out.push(Piece::Call(c));
                }
            }
        }
        if end && self.calls == 0 && !self.blank.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut self.blank)));
        }
        out
    }
}

/// A call id as Mistral's templates take them (9 letters and digits), made from `id` so the
/// same id always maps alike; one already of that shape is kept.
pub fn short_id(id: &str) -> String {
    if id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return id.to_owned();
    }
    // FNV-1a over the id's bytes.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    alphanumeric(hash)
}

fn alphanumeric(mut x: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..9)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Rewrites the call ids of OpenAI chat `messages` (assistant `tool_calls[].id`, tool
/// `tool_call_id`) into [`short_id`]s, for templates that refuse other ids.
pub fn shorten_call_ids(messages: &mut Value) {
    for m in messages.as_array_mut().into_iter().flatten() {
        if let Some(Value::String(id)) = m.get_mut("tool_call_id") {
            *id = short_id(id);
        }
        let calls = m.get_mut("tool_calls").and_then(Value::as_array_mut);
        for call in calls.into_iter().flatten() {
            if let Some(Value::String(id)) = call.get_mut("id") {
                *id = short_id(id);
            }
        }
    }
}

/// The names of an OpenAI chat `tools` array's functions.
pub fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// A fresh call id: `prefix` and 24 hex digits. (For Mistral's templates, which take only ids
/// of 9 letters and digits, [`shorten_call_ids`] maps ids when a conversation is rendered.)
pub fn call_id(prefix: &str) -> String {
    let (a, b) = (crate::params::fresh_seed(), crate::params::fresh_seed());
    format!("{prefix}{a:016x}{:08x}", b as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser(format: ToolFormat) -> ToolParser {
        ToolParser::new(format, vec!["get_weather".into(), "get_time".into()])
    }

    /// A forced-call grammar accepts what the templates write and the parser reads back as the
    /// same calls, and refuses an unknown tool or arguments outside the schema: the grammar
    /// compiled by llguidance over tiny-chat's tokenizer, fed the tokens of each text.
    #[test]
    fn forced_call_grammars_accept_what_the_parser_reads() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat");
        let registry = poot_models::Registry::builtin().unwrap();
        let handle =
            poot_llm::ModelHandle::load(&dir, &registry, &poot_llm::LoadOptions::default())
                .unwrap();
        let tokenizer = handle.text().unwrap().tokenizer();
        let guides = handle.guides().unwrap();
        let tools = vec![
            (
                "get_weather".to_string(),
                serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}),
            ),
            (
                "get_time".to_string(),
                serde_json::json!({"type": "object"}),
            ),
        ];
        // Whether the grammar takes `whole`, token by token, and accepts at its end.
        let takes = |grammar: &str, whole: &str| -> bool {
            let mut guide = guides
                .compile(&poot_llm::Constraint::Lark(grammar.to_string()))
                .unwrap();
            let plain = poot_text::EncodeOptions {
                add_special: false,
                parse_special: false,
            };
            let ids = tokenizer.encode(whole, plain).unwrap();
            ids.iter().all(|&t| guide.advance(t).is_ok()) && guide.is_accepting()
        };
        let weather = call("get_weather", r#"{"city": "Paris"}"#);
        let time = call("get_time", "{}");
        let cases: [(ToolFormat, &str, &str, Vec<Piece>); 4] = [
            (
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                vec![weather.clone(), text("\n"), time.clone()],
            ),
            (
                ToolFormat::Llama3Json,
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                "; {\"name\": \"get_time\", \"parameters\": {}}",
                vec![weather.clone(), time.clone()],
            ),
            (
                ToolFormat::Mistral,
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                ", {\"name\": \"get_time\", \"arguments\": {}}]",
                vec![weather.clone(), time.clone()],
            ),
            (
                ToolFormat::Generic,
                "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                ", {\"name\": \"get_time\", \"arguments\": {}}]}",
                vec![weather.clone(), time.clone()],
            ),
        ];
        for (format, first, second, want) in cases {
            let syntax = ToolSyntax::plain(format);
            let one = syntax.forced_grammar(&tools, false);
            let several = syntax.forced_grammar(&tools, true);
            let (single, both) = match format {
                ToolFormat::Mistral => (format!("{first}]"), format!("{first}{second}")),
                ToolFormat::Generic => (format!("{first}]}}"), format!("{first}{second}")),
                _ => (first.to_string(), format!("{first}{second}")),
            };
            assert!(takes(&one, &single), "{format:?}: {one}");
            assert!(takes(&several, &both), "{format:?}: {several}");
            assert!(!takes(&one, &both), "{format:?}: one call only");
            assert_eq!(run(format, &[&both]), want, "{format:?}");
            // An unknown tool, or arguments the schema refuses, are not derived.
            let unknown = single.replace("get_weather", "launch_rockets");
            assert!(!takes(&one, &unknown), "{format:?}");
            let bad_args = single.replace("\"Paris\"", "7");
            assert!(!takes(&one, &bad_args), "{format:?}");
        }
    }

    fn call(name: &str, args: &str) -> Piece {
        Piece::Call(ToolCall {
            name: name.into(),
            arguments: serde_json::from_str::<Value>(args).unwrap().to_string(),
        })
    }

    fn text(t: &str) -> Piece {
        Piece::Text(t.into())
    }

    /// Feeds `chunks` one by one, then finishes; merges adjacent text.
    fn run(format: ToolFormat, chunks: &[&str]) -> Vec<Piece> {
        let mut p = parser(format);
        let mut all: Vec<Piece> = Vec::new();
        for c in chunks {
            all.extend(p.push(c));
        }
        all.extend(p.finish());
        merge(all)
    }

    fn merge(pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for p in pieces {
            match (out.last_mut(), p) {
                (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
                (_, p) => out.push(p),
            }
        }
        out
    }

    /// Every split of `whole` into two chunks gives the same pieces as one chunk.
    fn same_for_every_split(format: ToolFormat, whole: &str, want: &[Piece]) {
        assert_eq!(run(format, &[whole]), want, "whole");
        for (at, _) in whole.char_indices().skip(1) {
            let (a, b) = whole.split_at(at);
            assert_eq!(run(format, &[a, b]), want, "split at {at}: {a:?} | {b:?}");
        }
        let chars: Vec<String> = whole.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(format, &refs), want, "char by char");
    }

    #[test]
    fn generic_answers_are_calls_when_the_whole_answer_is_the_calls_object() {
        same_for_every_split(
            ToolFormat::Generic,
            " {\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]}\n",
            &[
                call("get_weather", r#"{"city": "Paris"}"#),
                call("get_time", "{}"),
            ],
        );
        same_for_every_split(
            ToolFormat::Generic,
            "{\"tool_call\": {\"name\": \"get_time\", \"arguments\": {}}}",
            &[call("get_time", "{}")],
        );
        // Text, an unknown tool, other keys, an empty list or an unclosed object stay text.
        for answer in [
            "It is sunny in Paris.",
            "{\"tool_calls\": [{\"name\": \"launch_rockets\", \"arguments\": {}}]}",
            "{\"tool_calls\": [], \"note\": 1}",
            "{\"tool_calls\": []}",
            "{\"tool_calls\": [{\"name\": \"get_time\"",
            "Sure: {\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}",
        ] {
            same_for_every_split(ToolFormat::Generic, answer, &[text(answer)]);
        }
    }

    #[test]
    fn a_generic_conversation_describes_the_tools_and_writes_calls_and_results_as_text() {
        let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let messages = serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 C"},
        ]);
        let out = generic_conversation(messages, Some(&tools));
        let out = out.as_array().unwrap();
        assert_eq!(out.len(), 4, "{out:?}");
        let system = out[0]["content"].as_str().unwrap();
        assert_eq!(out[0]["role"], "system");
        assert!(system.starts_with("Be brief.\n\n"), "{system}");
        assert!(
            system.contains("\"name\":\"get_weather\"") && system.contains("\"tool_calls\""),
            "{system}"
        );
        assert_eq!(
            out[1],
            serde_json::json!({"role": "user", "content": "Weather in Paris?"})
        );
        assert_eq!(out[2]["role"], "assistant");
        assert!(out[2].get("tool_calls").is_none());
        let written: Value = serde_json::from_str(out[2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})
        );
        // What the model wrote is what the parser reads back as the call.
        assert_eq!(
            run(ToolFormat::Generic, &[out[2]["content"].as_str().unwrap()]),
            vec![call("get_weather", r#"{"city":"Paris"}"#)]
        );
        assert_eq!(out[3]["role"], "user");
        let result: Value = serde_json::from_str(out[3]["content"].as_str().unwrap()).unwrap();
        assert_eq!(
            result,
            serde_json::json!({"tool_response": {"name": "get_weather", "content": "21 C"}})
        );
        // Without tools nothing is added.
        let plain = serde_json::json!([{"role": "user", "content": "Hi"}]);
        assert_eq!(generic_conversation(plain.clone(), None), plain);
    }

    #[test]
    fn hermes_calls_with_text_around_them() {
        same_for_every_split(
            ToolFormat::Hermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call> done",
            &[
                text("Let me check.\n"),
                call("get_weather", r#"{"city": "Paris"}"#),
                text(" done"),
            ],
        );
    }

    #[test]
    fn hermes_parallel_calls() {
        same_for_every_split(
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
            &[
                call("get_weather", r#"{"city": "Paris"}"#),
                text("\n"),
                call("get_time", "{}"),
            ],
        );
    }

    #[test]
    fn hermes_malformed_or_unknown_calls_stay_text() {
        for whole in [
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": }</tool_call>",
            "<tool_call>{\"name\": \"launch_rockets\", \"arguments\": {}}</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>",
            "<tool_call>[\"get_time\"]</tool_call>",
        ] {
            same_for_every_split(ToolFormat::Hermes, whole, &[text(whole)]);
        }
        // A bad block between good ones stays text between the calls.
        same_for_every_split(
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"get_time\"}</tool_call><tool_call>{oops}</tool_call>",
            &[
                call("get_time", "{}"),
                text("<tool_call>{oops}</tool_call>"),
            ],
        );
    }

    #[test]
    fn hermes_partial_at_the_end_stays_text_unless_complete() {
        // Cut off by the token limit mid-call: text.
        let cut = "Sure <tool_call>{\"name\": \"get_weather\", \"argu";
        same_for_every_split(ToolFormat::Hermes, cut, &[text(cut)]);
        // A marker start at the very end: text.
        same_for_every_split(ToolFormat::Hermes, "a <tool_ca", &[text("a <tool_ca")]);
        // The closing tag left out, the call complete: a call.
        same_for_every_split(
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n",
            &[call("get_time", r#"{"tz": "UTC"}"#)],
        );
    }

    #[test]
    fn hermes_text_is_released_as_soon_as_it_cannot_be_a_call() {
        let mut p = parser(ToolFormat::Hermes);
        assert_eq!(p.push("Hello <"), vec![text("Hello ")]);
        assert_eq!(p.push("b> world"), vec![text("<b> world")]);
        assert_eq!(p.push(" <tool_"), vec![text(" ")]);
        assert_eq!(p.push("call>{\"name\": \"get_time\"}"), vec![]);
        assert_eq!(p.push("</tool_call>"), vec![call("get_time", "{}")]);
        assert_eq!(p.finish(), vec![]);
    }

    #[test]
    fn llama3_bare_json_calls() {
        same_for_every_split(
            ToolFormat::Llama3Json,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            &[call("get_weather", r#"{"city": "Paris"}"#)],
        );
        same_for_every_split(
            ToolFormat::Llama3Json,
            " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
            &[
                call("get_weather", r#"{"city": "Paris"}"#),
                call("get_time", "{}"),
            ],
        );
    }

    #[test]
    fn llama3_python_tag_calls_after_content() {
        same_for_every_split(
            ToolFormat::Llama3Json,
            "Checking.<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}",
            &[text("Checking."), call("get_time", r#"{"tz": "UTC"}"#)],
        );
    }

    #[test]
    fn llama3_text_and_malformed_json_stay_text() {
        for whole in [
            "The answer is {42}.",
            "Plain answer.",
            "{\"name\": \"get_time\", \"parameters\": {}",
            "{\"name\": \"nope\", \"parameters\": {}}",
            "{\"name\": \"get_time\", \"parameters\": {}} and then text",
            "<|python_tag|>brave_search.call(query=\"x\")",
            "   ",
        ] {
            same_for_every_split(ToolFormat::Llama3Json, whole, &[text(whole)]);
        }
        // Text that opens like the tag is released once it is not the tag.
        let mut p = parser(ToolFormat::Llama3Json);
        assert_eq!(p.push("<|py"), vec![]);
        assert_eq!(p.push("x"), vec![text("<|pyx")]);
        // After text, a `{` is plain text.
        assert_eq!(p.push(" {"), vec![text(" {")]);
    }

    #[test]
    fn mistral_json_array_calls() {
        same_for_every_split(
            ToolFormat::Mistral,
            "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
            &[
                call("get_weather", r#"{"city": "Paris"}"#),
                call("get_time", "{}"),
            ],
        );
        same_for_every_split(
            ToolFormat::Mistral,
            "Let me look.[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
            &[text("Let me look."), call("get_time", "{}")],
        );
    }

    #[test]
    fn mistral_args_segments() {
        same_for_every_split(
            ToolFormat::Mistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
            &[
                call("get_weather", r#"{"city": "Paris"}"#),
                call("get_time", "{}"),
            ],
        );
    }

    #[test]
    fn mistral_malformed_stays_text() {
        for whole in [
            "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}",
            "[TOOL_CALLS] [{\"name\": \"rm_rf\", \"arguments\": {}}]",
            "[TOOL_CALLS]get_time{}",
            "[TOOL_CALLS]",
            "No calls [here].",
        ] {
            same_for_every_split(ToolFormat::Mistral, whole, &[text(whole)]);
        }
    }

    #[test]
    fn string_arguments_holding_an_object_are_accepted() {
        same_for_every_split(
            ToolFormat::Hermes,
            r#"<tool_call>{"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}</tool_call>"#,
            &[call("get_time", r#"{"tz": "UTC"}"#)],
        );
    }

    #[test]
    fn formats_are_detected_from_templates() {
        assert_eq!(
            ToolFormat::detect(["{{ '<tool_call>\\n' }}"]),
            Some(ToolFormat::Hermes)
        );
        assert_eq!(
            ToolFormat::detect(["x", "{{ '[TOOL_CALLS]' }}"]),
            Some(ToolFormat::Mistral)
        );
        assert_eq!(
            ToolFormat::detect(["{{ '<|python_tag|>' }}"]),
            Some(ToolFormat::Llama3Json)
        );
        assert_eq!(
            ToolFormat::detect(["<|start_header_id|>{% if tools %}"]),
            Some(ToolFormat::Llama3Json)
        );
        assert_eq!(ToolFormat::detect(["<|im_start|>"]), None);
    }

    #[test]
    fn names_come_from_either_tool_shape() {
        let tools = serde_json::json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "name": "b"},
            {"type": "function"}
        ]);
        assert_eq!(tool_names(&tools), vec!["a".to_owned(), "b".to_owned()]);
    }

    #[test]
    fn call_ids_have_their_shape() {
        let id = call_id("call_");
        assert!(id.starts_with("call_") && id.len() == 5 + 24, "{id}");
        assert_ne!(call_id("call_"), call_id("call_"));
    }

    #[test]
    fn blanks_around_calls_are_dropped_and_kept_without_calls() {
        let syntax = ToolSyntax {
            format: ToolFormat::Hermes,
            controls: Vec::new(),
        };
        let mut a = Answer::with_tools(&syntax, vec!["get_time".into()]);
        let mut got = a.token(1, "\n<tool_call>{\"name\": \"get_time\"}</tool_call>");
        got.extend(a.token(2, "\n<tool_call>{\"name\": \"get_time\"}</tool_call>\n"));
        got.extend(a.end(""));
        assert_eq!(got, vec![call("get_time", "{}"), call("get_time", "{}")]);
        assert_eq!(a.calls(), 2);
        let mut a = Answer::with_tools(&syntax, vec!["get_time".into()]);
        let mut got = a.token(1, " ");
        got.extend(a.token(2, "\n"));
        assert_eq!(got, vec![]);
        assert_eq!(a.end(""), vec![text(" \n")]);
        // Without tools the text passes as it comes.
        let mut a = Answer::plain();
        assert_eq!(a.token(1, " "), vec![text(" ")]);
        assert_eq!(a.token(1, ""), vec![]);
    }

    #[test]
    fn control_token_markers_are_put_back() {
        let syntax = ToolSyntax {
            format: ToolFormat::Mistral,
            controls: vec![(5, MISTRAL_CALLS)],
        };
        let mut a = Answer::with_tools(&syntax, vec!["get_time".into()]);
        let mut got = a.token(9, "Sure.");
        // The decoder leaves `[TOOL_CALLS]` (id 5) out; what it released came before it.
        got.extend(a.token(5, " "));
        got.extend(a.token(7, "[{\"name\": \"get_time\", \"arguments\": {}}]"));
        got.extend(a.end(""));
        assert_eq!(got, vec![text("Sure."), call("get_time", "{}")]);
    }

    #[test]
    fn short_ids_are_stable_and_shaped() {
        assert_eq!(short_id("abcDEF123"), "abcDEF123");
        let s = short_id("call_1");
        assert_eq!(s, short_id("call_1"));
        assert_ne!(s, short_id("call_2"));
        assert!(s.len() == 9 && s.chars().all(|c| c.is_ascii_alphanumeric()));
        let mut messages = serde_json::json!([
            {"role": "assistant", "tool_calls": [{"id": "call_1", "function": {"name": "f"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "x"}
        ]);
        shorten_call_ids(&mut messages);
        assert_eq!(messages[0]["tool_calls"][0]["id"], s.as_str());
        assert_eq!(messages[1]["tool_call_id"], s.as_str());
    }
}
