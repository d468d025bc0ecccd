//! Built-in chat formats for models that ship no template, chosen by an explicit key (a
//! family names its format; poot never guesses one from the vocabulary).
//!
//! The templates are the formats' Jinja sources as the axolotl project packages them
//! (axolotl 0.19.0, `axolotl/utils/chat_templates/templates`), so they render exactly like the
//! models' own templates; except `gemma`, a family's fallback for a GGUF without a template,
//! which renders what llama.cpp's built-in gemma format does (`src/llama-chat.cpp`): Gemma's
//! own template refuses a system message, llama.cpp's joins it to the first user turn.

use crate::chat_template::ChatTemplate;
use crate::error::ChatError;

/// The table: key and template source.
const FORMATS: &[(&str, &str)] = &[
    ("chatml", include_str!("chat_formats/chatml.jinja")),
    ("gemma", include_str!("chat_formats/gemma.jinja")),
    ("gemma3", include_str!("chat_formats/gemma3.jinja")),
    ("llama3", include_str!("chat_formats/llama3.jinja")),
    ("mistral", include_str!("chat_formats/mistral.jinja")),
    ("phi3", include_str!("chat_formats/phi3.jinja")),
];

/// The keys of the built-in formats.
pub fn builtin_chat_formats() -> impl Iterator<Item = &'static str> {
    FORMATS.iter().map(|(k, _)| *k)
}

pub(crate) fn known_keys() -> String {
    builtin_chat_formats().collect::<Vec<_>>().join(", ")
}

/// Compiles the built-in format `key`.
pub fn builtin_chat_template(key: &str) -> Result<ChatTemplate, ChatError> {
    let (_, source) =
        FORMATS
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| ChatError::UnknownFormat {
                key: key.to_owned(),
                known: known_keys(),
            })?;
    ChatTemplate::new(key, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_compiles() {
        for key in builtin_chat_formats() {
            builtin_chat_template(key).expect("built-in template compiles");
        }
        assert!(matches!(
            builtin_chat_template("nope"),
            Err(ChatError::UnknownFormat { .. })
        ));
    }
}
