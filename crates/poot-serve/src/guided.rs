//! Guided decoding's request fields, read into one [`Constraint`] per request: OpenAI's
//! `response_format` (`json_object`, `json_schema`), the Responses API's `text.format`, vLLM's
//! extensions (`guided_json`, `guided_regex`, `guided_grammar` in llguidance's Lark dialect,
//! `guided_choice`), and a forced tool call (`tool_choice` `required` or a named function,
//! Anthropic's `any` and `tool`), which constrains the answer to the model's call syntax with
//! the tools' parameter schemas. Each constraint is compiled once here, so an invalid schema,
//! regex or grammar is a 400 with llguidance's message before anything is queued.

use poot_llm::{Constraint, GuideError, HandleError};
use serde_json::Value;

use crate::chat::ToolUse;
use crate::error::ApiError;
use crate::http::App;
use crate::openai::SamplingFields;

/// A call the answer must make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Calls to any of the tools (`required`, Anthropic's `any`): one or more when the request
    /// allows parallel calls, else one.
    Any { parallel: bool },
    /// One call to this tool.
    Named(String),
}

/// The constraint of vLLM's `guided_*` fields, at most one of them.
pub fn from_extensions(f: &SamplingFields) -> Result<Option<(Constraint, &'static str)>, ApiError> {
    let mut found = Vec::new();
    if let Some(schema) = &f.guided_json {
        let schema = match schema {
            // vLLM takes the schema as an object or as its JSON text.
            Value::String(text) => serde_json::from_str(text).map_err(|e| {
                ApiError::invalid_value("guided_json", format!("guided_json is not JSON: {e}"))
            })?,
            other => other.clone(),
        };
        found.push((Constraint::JsonSchema(schema), "guided_json"));
    }
    if let Some(rx) = &f.guided_regex {
        found.push((Constraint::Regex(rx.clone()), "guided_regex"));
    }
    if let Some(lark) = &f.guided_grammar {
        found.push((Constraint::Lark(lark.clone()), "guided_grammar"));
    }
    if let Some(choices) = &f.guided_choice {
        if choices.is_empty() {
            return Err(ApiError::invalid_value(
                "guided_choice",
                "guided_choice must name at least one choice",
            ));
        }
        // Each choice literally: one alternative per choice.
        let alternatives: Vec<String> = choices
            .iter()
            .map(|c| Value::from(c.as_str()).to_string())
            .collect();
        found.push((
            Constraint::Lark(format!("start: {}\n", alternatives.join(" | "))),
            "guided_choice",
        ));
    }
    match <[_; 1]>::try_from(found) {
        Ok([one]) => Ok(Some(one)),
        Err(found) if found.is_empty() => Ok(None),
        Err(found) => Err(ApiError::invalid(
            format!(
                "at most one of guided_json, guided_regex, guided_grammar and guided_choice (got {})",
                found.iter().map(|f| f.1).collect::<Vec<_>>().join(", ")
            ),
            Some(found[1].1),
        )),
    }
}

/// The constraint of a response format: chat's `response_format` (`param`), whose JSON
/// schema sits under `json_schema`, or the Responses API's `text.format`, whose schema fields
/// sit beside `type`. `text` is no constraint.
pub fn from_response_format(format: &Value, param: &str) -> Result<Option<Constraint>, ApiError> {
    let kind = format.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => {
            let holder = format.get("json_schema").unwrap_or(format);
            let Some(schema) = holder.get("schema") else {
                return Err(ApiError::invalid(
                    format!("{param}: a json_schema format needs a `schema`"),
                    Some(param),
                ));
            };
            // `strict` asks for output that follows the schema exactly, which guided decoding
            // always gives; a non-strict format is constrained the same way.
            Ok(Some(Constraint::JsonSchema(schema.clone())))
        }
        Some(other) => Err(ApiError::invalid(
            format!("{param}: unknown type `{other}` (expected text, json_object or json_schema)"),
            Some(param),
        )),
        None => Err(ApiError::invalid(
            format!("{param}: an object with a string `type` is required"),
            Some(param),
        )),
    }
}

/// The constraint forcing `forced` calls to `tools` (OpenAI chat tools) in the model's call
/// syntax. Refused when the model's chat format has no call syntax, the request offers no
/// tools, or the named tool is not among them.
pub fn forced_call(
    app: &App,
    tools: Option<&Value>,
    forced: &Forced,
    param: &str,
) -> Result<Constraint, ApiError> {
    let Some(syntax) = &app.tool_syntax else {
        return Err(ApiError::invalid(
            format!(
                "{param}: forcing a tool call needs a call syntax, and this model's chat template shows none"
            ),
            Some(param),
        ));
    };
    let offered: Vec<(String, Value)> = tools
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name")?.as_str()?.to_owned();
            let params = f
                .get("parameters")
                .or_else(|| f.get("input_schema"))
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"}));
            Some((name, params))
        })
        .collect();
    if offered.is_empty() {
        return Err(ApiError::invalid(
            format!("{param}: forcing a tool call needs `tools`"),
            Some(param),
        ));
    }
    let (chosen, several) = match forced {
        Forced::Any { parallel } => (offered, *parallel),
        Forced::Named(name) => {
            let Some(tool) = offered.into_iter().find(|(n, _)| n == name) else {
                return Err(ApiError::invalid(
                    format!("{param}: no tool named `{name}` among the request's tools"),
                    Some(param),
                ));
            };
            (vec![tool], false)
        }
    };
    Ok(Constraint::Lark(syntax.forced_grammar(&chosen, several)))
}

/// Compiles `c` once against the model's tokenizer: a 400 naming `param` with llguidance's
/// message when it is invalid.
pub fn check(app: &App, c: &Constraint, param: &str) -> Result<(), ApiError> {
    let guides = app.handle.guides().map_err(|e: HandleError| {
        ApiError::engine(format!("guided decoding is unavailable: {e}"))
    })?;
    match guides.compile(c) {
        Ok(_) => Ok(()),
        Err(e @ GuideError::Invalid { .. }) => Err(ApiError::invalid(e.to_string(), Some(param))),
        Err(e) => Err(ApiError::engine(e.to_string())),
    }
}

/// OpenAI's `tool_choice`, chat's or the Responses API's: `auto`, `none`, `required`, or a
/// named function (`{"type": "function", "function": {"name"}}` in chat, `{"type":
/// "function", "name"}` in Responses). Whether calls are parsed, and the call it forces.
pub fn openai_tool_choice(choice: Option<&Value>) -> Result<(ToolUse, Option<Forced>), ApiError> {
    let bad = |why: &str| ApiError::invalid(format!("tool_choice: {why}"), Some("tool_choice"));
    match choice {
        None | Some(Value::Null) => Ok((ToolUse::Auto, None)),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok((ToolUse::Auto, None)),
            "none" => Ok((ToolUse::None, None)),
            "required" => Ok((ToolUse::Auto, Some(Forced::Any { parallel: true }))),
            other => Err(bad(&format!(
                "unknown value `{other}` (expected auto, none, required or a function)"
            ))),
        },
        Some(v) if v.get("type").and_then(Value::as_str) == Some("function") => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| v.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a function choice needs its `name`"))?;
            Ok((ToolUse::Auto, Some(Forced::Named(name.to_owned()))))
        }
        Some(_) => Err(bad(
            "expected auto, none, required or {\"type\": \"function\", ...}",
        )),
    }
}

/// The one constraint among a request's fields (each with the param that gave it), compiled
/// once to check it. Two fields that each constrain the output are refused.
pub fn resolve(app: &App, found: Vec<(Constraint, &str)>) -> Result<Option<Constraint>, ApiError> {
    match <[_; 1]>::try_from(found) {
        Ok([(c, param)]) => {
            check(app, &c, param)?;
            Ok(Some(c))
        }
        Err(found) if found.is_empty() => Ok(None),
        Err(found) => Err(ApiError::invalid(
            format!(
                "{} and {} both constrain the output; give one",
                found[0].1, found[1].1
            ),
            Some(found[1].1),
        )),
    }
}
