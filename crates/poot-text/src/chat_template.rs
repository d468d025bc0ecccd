//! A compiled Jinja chat template, in an environment set up to render like transformers'
//! `apply_chat_template` (Jinja2 with `trim_blocks`, `lstrip_blocks`, loop controls, a
//! Python-`json.dumps` `tojson`, `raise_exception` and `strftime_now`).
//!
//! Beyond that setup, values print as Python prints them (`None`, `True`, `['a']`), Python
//! string and dict methods work through minijinja-contrib's pycompat callback, and
//! transformers' `{% generation %}` blocks render their body.

use std::sync::OnceLock;

use fancy_regex::Regex;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};

use crate::error::ChatError;
use crate::python_format::{JsonStyle, json_dumps, py_str};

/// The context variable that pins `strftime_now`'s clock (a `YYYY-MM-DDTHH:MM:SS` civil time);
/// when absent the template sees the local time.
pub(crate) const NOW_VARIABLE: &str = "__poot_now";

/// A chat template ready to render.
#[derive(Debug)]
pub struct ChatTemplate {
    name: String,
    source: String,
    env: Environment<'static>,
}

/// The message of a `raise_exception` call, carried as the render error's source so it can be
/// told apart from other failures.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

impl ChatTemplate {
    /// Compiles `source`; `name` labels errors (`default`, `tool_use`, a built-in key).
    pub fn new(name: &str, source: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = environment().map_err(|source| ChatError::Syntax {
            name: name.to_owned(),
            source,
        })?;
        env.add_template_owned(name.to_owned(), rewrite_generation_tags(source))
            .map_err(|source| ChatError::Syntax {
                name: name.to_owned(),
                source,
            })?;
        Ok(ChatTemplate {
            name: name.to_owned(),
            source: source.to_owned(),
            env,
        })
    }

    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template text as shipped.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders with a prepared context.
    pub(crate) fn render(&self, context: Value) -> Result<String, ChatError> {
        let template = self
            .env
            .get_template(&self.name)
            .map_err(|source| ChatError::Render { source })?;
        template
            .render(context)
            .map_err(|source| match raised_message(&source) {
                Some(message) => ChatError::Raised { message },
                None => ChatError::Render { source },
            })
    }
}

/// The message of a `raise_exception` anywhere in the error's source chain.
fn raised_message(error: &Error) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        current = e.source();
    }
    None
}

/// transformers renders `{% generation %}…{% endgeneration %}` as its body (the tag only
/// marks assistant text for training masks). The tags become an always-true `if` with the same
/// whitespace control, so trimming around them is unchanged.
fn rewrite_generation_tags(source: &str) -> String {
    static OPEN: OnceLock<Option<Regex>> = OnceLock::new();
    static CLOSE: OnceLock<Option<Regex>> = OnceLock::new();
    let open = OPEN.get_or_init(|| Regex::new(r"\{%(-|\+)?\s*generation\s*(-|\+)?%\}").ok());
    let close = CLOSE.get_or_init(|| Regex::new(r"\{%(-|\+)?\s*endgeneration\s*(-|\+)?%\}").ok());
    let mut out = source.to_owned();
    if let Some(re) = open {
        out = re.replace_all(&out, "{%${1} if true ${2}%}").into_owned();
    }
    if let Some(re) = close {
        out = re.replace_all(&out, "{%${1} endif ${2}%}").into_owned();
    }
    out
}

fn environment() -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?,
    );
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, _state, value| {
        let mut text = String::new();
        py_str(&mut text, value)?;
        out.write_str(&text)
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    Ok(env)
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

fn strftime_now(state: &State, format: String) -> Result<Value, Error> {
    let pinned = state
        .lookup(NOW_VARIABLE)
        .and_then(|v| v.as_str().map(str::to_owned));
    let formatted = match pinned {
        Some(civil) => {
            let time: jiff::civil::DateTime = civil
                .parse()
                .map_err(|e: jiff::Error| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            time.strftime(&format).to_string()
        }
        None => jiff::Zoned::now().strftime(&format).to_string(),
    };
    Ok(Value::from(formatted))
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// Python's `json.dumps` with those options (the first two also positionally).
fn tojson(
    value: Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let (separators, sort_keys) = (None, None);
    let pick = |positional: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        match kwargs.get::<Option<Value>>(name)? {
            Some(v) => Ok(Some(v)),
            None => Ok(positional),
        }
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match pick(indent, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(v.as_usize().unwrap_or(0))),
        },
    };
    let mut style = JsonStyle::new(ensure_ascii, indent);
    if let Some(seps) = pick(separators, "separators")?.filter(|v| !v.is_none()) {
        let parts: Vec<Value> = seps.try_iter()?.collect();
        if let [item, key] = parts.as_slice() {
            style.item_separator = item.as_str().unwrap_or(", ").to_owned();
            style.key_separator = key.as_str().unwrap_or(": ").to_owned();
        } else {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson separators must be a pair",
            ));
        }
    }
    style.sort_keys = pick(sort_keys, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    json_dumps(&value, &style).map(Value::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: serde_json::Value) -> Result<String, ChatError> {
        ChatTemplate::new("t", source)?.render(Value::from(minijinja::value::Serde(&ctx)))
    }

    #[test]
    fn blocks_trim_like_transformers() {
        let out = render(
            "{% for m in messages %}\n  {{ m }}\n{% endfor %}",
            serde_json::json!({"messages": ["a", "b"]}),
        );
        assert_eq!(out.expect("renders"), "  a\n  b\n");
    }

    #[test]
    fn raise_exception_is_typed() {
        let err = render(
            "{{ raise_exception('no system role') }}",
            serde_json::json!({}),
        );
        assert!(matches!(err, Err(ChatError::Raised { message }) if message == "no system role"));
    }

    #[test]
    fn tojson_takes_python_options() {
        let ctx = serde_json::json!({"v": {"b": "<x>", "a": [1, 2]}});
        assert_eq!(
            render("{{ v | tojson }}", ctx.clone()).expect("renders"),
            r#"{"b": "<x>", "a": [1, 2]}"#
        );
        assert_eq!(
            render("{{ v | tojson(indent=2, sort_keys=true) }}", ctx.clone()).expect("renders"),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"<x>\"\n}"
        );
        assert_eq!(
            render("{{ v | tojson(separators=(',', ':')) }}", ctx).expect("renders"),
            r#"{"b":"<x>","a":[1,2]}"#
        );
    }

    #[test]
    fn generation_tags_render_their_body() {
        let out = render(
            "a{% generation %}b{% endgeneration %}c{%- generation -%} d {%- endgeneration -%}",
            serde_json::json!({}),
        );
        assert_eq!(out.expect("renders"), "abcd");
    }

    #[test]
    fn values_print_like_python() {
        let out = render(
            "{{ n }} {{ t }} {{ l }} {{ u }}",
            serde_json::json!({"n": null, "t": true, "l": ["x", 1]}),
        );
        assert_eq!(out.expect("renders"), "None True ['x', 1] ");
    }

    #[test]
    fn strftime_now_can_be_pinned() {
        let out = render(
            "{{ strftime_now('%d %b %Y') }}",
            serde_json::json!({NOW_VARIABLE: "2026-01-15T10:30:00"}),
        );
        assert_eq!(out.expect("renders"), "15 Jan 2026");
    }

    #[test]
    fn syntax_errors_are_typed() {
        assert!(matches!(
            ChatTemplate::new("bad", "{% if %}"),
            Err(ChatError::Syntax { .. })
        ));
    }
}
