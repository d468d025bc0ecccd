//! Python's text forms of template values, which chat templates were written against:
//! `json.dumps` (behind transformers' `tojson` filter) and `repr`/`str` (what Jinja2 prints
//! for `{{ value }}`).

use std::fmt::Write as _;
use std::sync::OnceLock;

use fancy_regex::Regex;
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// The options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Clone, Debug)]
pub(crate) struct JsonStyle {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub(crate) ensure_ascii: bool,
    /// Pretty-print with this indent string per level.
    pub(crate) indent: Option<String>,
    /// Between items (`", "` compact, `","` when indenting).
    pub(crate) item_separator: String,
    /// Between a key and its value.
    pub(crate) key_separator: String,
    /// Sort object keys.
    pub(crate) sort_keys: bool,
}

impl JsonStyle {
    /// `json.dumps` defaults for the given indent: `(", ", ": ")`, or `(",", ": ")` when
    /// indenting.
    pub(crate) fn new(ensure_ascii: bool, indent: Option<String>) -> JsonStyle {
        let item_separator = if indent.is_some() { "," } else { ", " }.to_owned();
        JsonStyle {
            ensure_ascii,
            indent,
            item_separator,
            key_separator: ": ".to_owned(),
            sort_keys: false,
        }
    }
}

fn not_serializable(kind: ValueKind) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("Object of kind {kind} is not JSON serializable"),
    )
}

/// `json.dumps(value, ...)`.
pub(crate) fn json_dumps(value: &Value, style: &JsonStyle) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, style, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, style: &JsonStyle, level: usize) {
    if let Some(indent) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    style: &JsonStyle,
    level: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value, true),
        ValueKind::String => {
            write_json_string(out, value.as_str().unwrap_or_default(), style.ensure_ascii)
        }
        ValueKind::Seq => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_separator);
                }
                newline_indent(out, style, level + 1);
                write_json(out, item, style, level + 1)?;
            }
            newline_indent(out, style, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((json_key(&key)?, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_separator);
                }
                newline_indent(out, style, level + 1);
                write_json_string(out, key, style.ensure_ascii);
                out.push_str(&style.key_separator);
                write_json(out, item, style, level + 1)?;
            }
            newline_indent(out, style, level);
            out.push('}');
        }
        kind => return Err(not_serializable(kind)),
    }
    Ok(())
}

/// Python converts non-string keys the way it prints them as JSON values.
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::None => "null".to_owned(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key, true);
            s
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("keys must be str, not {kind}"),
            ));
        }
    })
}

/// Integers print as integers; floats as Python's `repr` (`1.0`, `1e-05`), with JSON's
/// `NaN`/`Infinity` or Python's `nan`/`inf`.
fn write_number(out: &mut String, value: &Value, json: bool) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if x.is_nan() {
        out.push_str(if json { "NaN" } else { "nan" });
    } else if x.is_infinite() {
        out.push_str(match (x > 0.0, json) {
            (true, true) => "Infinity",
            (false, true) => "-Infinity",
            (true, false) => "inf",
            (false, false) => "-inf",
        });
    } else {
        out.push_str(&float_repr(x));
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for decimal
/// exponents in -4..16, scientific (`1e+16`, `1.5e-07`) otherwise.
pub(crate) fn float_repr(x: f64) -> String {
    // `{:e}` gives the shortest round-trip digits as `d.ddde±x`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let n = digits.len() as i32;
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if point >= n {
            format!("{sign}{digits}{}.0", "0".repeat((point - n) as usize))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{sign}{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What Jinja2 prints for `{{ value }}`: Python's `str` (strings raw, `None`, `True`, lists
/// and dicts as their `repr`). Undefined prints nothing.
pub(crate) fn py_str(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => py_repr(out, value)?,
    }
    Ok(())
}

/// Python's `repr` of a JSON-like value.
fn py_repr(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_number(out, value, false),
        ValueKind::String => write_py_string(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &item)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &key)?;
                out.push_str(": ");
                py_repr(out, &value.get_item(&key)?)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
    Ok(())
}

/// Characters Python's `str.isprintable()` rejects (other than the ASCII ones handled
/// before): separators other than the space, and the `C*` categories (surrogates cannot occur
/// in a Rust string).
fn unprintable() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]$").ok())
        .as_ref()
}

fn write_py_string(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    let mut buf = [0u8; 4];
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            ' ' => out.push(' '),
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) >= 0x80
                && unprintable()
                    .is_some_and(|re| re.is_match(c.encode_utf8(&mut buf)).unwrap_or(false)) =>
            {
                let cp = c as u32;
                let _ = match cp {
                    0..=0xff => write!(out, "\\x{cp:02x}"),
                    0x100..=0xffff => write!(out, "\\u{cp:04x}"),
                    _ => write!(out, "\\U{cp:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(json: serde_json::Value, style: &JsonStyle) -> String {
        json_dumps(&Value::from(minijinja::value::Serde(&json)), style).expect("serializable")
    }

    #[test]
    fn floats_print_like_python() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456789012345.6, "123456789012345.6"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn json_matches_python_defaults() {
        let v = serde_json::json!({"b": [1, 2.5, null, true], "a": "<tag> é \u{1F600} \"q\"\n"});
        assert_eq!(
            dumps(v.clone(), &JsonStyle::new(false, None)),
            r#"{"b": [1, 2.5, null, true], "a": "<tag> é 😀 \"q\"\n"}"#
        );
        assert_eq!(
            dumps(v.clone(), &JsonStyle::new(true, None)),
            r#"{"b": [1, 2.5, null, true], "a": "<tag> \u00e9 \ud83d\ude00 \"q\"\n"}"#
        );
        let mut sorted = JsonStyle::new(false, Some("  ".into()));
        sorted.sort_keys = true;
        assert_eq!(
            dumps(v, &sorted),
            "{\n  \"a\": \"<tag> é 😀 \\\"q\\\"\\n\",\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}"
        );
        assert_eq!(
            dumps(
                serde_json::json!({"e": [], "o": {}}),
                &JsonStyle::new(false, Some(" ".into()))
            ),
            "{\n \"e\": [],\n \"o\": {}\n}"
        );
    }

    #[test]
    fn str_matches_python() {
        let v = Value::from(minijinja::value::Serde(
            serde_json::json!({"s": "it's", "n": null, "t": true, "l": [1.0, "a\u{a0}b"]}),
        ));
        let mut out = String::new();
        py_str(&mut out, &v).expect("printable");
        assert_eq!(
            out,
            r#"{'s': "it's", 'n': None, 't': True, 'l': [1.0, 'a\xa0b']}"#
        );
    }
}
