//! The parts of a Hugging Face `tokenizer_config.json` text services use: special-token
//! spellings and chat templates.

use serde_json::Value as Json;

use crate::error::TextError;
use crate::hf_tokenizer::HfSpecialTexts;

/// What `tokenizer_config.json` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HfTokenizerConfig {
    pub(crate) specials: HfSpecialTexts,
    /// `(name, source)`; a plain-string `chat_template` is named `default`.
    pub(crate) templates: Vec<(String, String)>,
}

/// A special token is written as a string, or as an added-token object with `content`.
fn token_text(config: &Json, field: &'static str) -> Result<Option<String>, TextError> {
    match config.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Object(o)) => match o.get("content") {
            Some(Json::String(s)) => Ok(Some(s.clone())),
            _ => Err(TextError::ConfigField {
                field,
                expected: "a string or an object with a string `content`",
            }),
        },
        Some(_) => Err(TextError::ConfigField {
            field,
            expected: "a string or an object with a string `content`",
        }),
    }
}

impl HfTokenizerConfig {
    pub(crate) fn parse(bytes: &[u8]) -> Result<HfTokenizerConfig, TextError> {
        let config: Json =
            serde_json::from_slice(bytes).map_err(|source| TextError::Config { source })?;
        if !config.is_object() {
            return Err(TextError::ConfigField {
                field: "(top level)",
                expected: "an object",
            });
        }
        let specials = HfSpecialTexts {
            bos: token_text(&config, "bos_token")?,
            eos: token_text(&config, "eos_token")?,
            pad: token_text(&config, "pad_token")?,
            unk: token_text(&config, "unk_token")?,
        };
        const TEMPLATE_LIST: &str = "a string or a list of {name, template} objects";
        let templates = match config.get("chat_template") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::String(s)) => vec![("default".to_owned(), s.clone())],
            Some(Json::Array(list)) => list
                .iter()
                .map(|entry| match (entry.get("name"), entry.get("template")) {
                    (Some(Json::String(n)), Some(Json::String(t))) => Ok((n.clone(), t.clone())),
                    _ => Err(TextError::ConfigField {
                        field: "chat_template",
                        expected: TEMPLATE_LIST,
                    }),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(TextError::ConfigField {
                    field: "chat_template",
                    expected: TEMPLATE_LIST,
                });
            }
        };
        Ok(HfTokenizerConfig {
            specials,
            templates,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tokens_and_templates() {
        let cfg = HfTokenizerConfig::parse(
            br#"{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
                 "chat_template": [{"name": "default", "template": "a"}, {"name": "tool_use", "template": "b"}]}"#,
        )
        .expect("valid config");
        assert_eq!(cfg.specials.bos.as_deref(), Some("<s>"));
        assert_eq!(cfg.specials.eos.as_deref(), Some("</s>"));
        assert_eq!(cfg.specials.pad, None);
        assert_eq!(
            cfg.templates,
            vec![
                ("default".into(), "a".into()),
                ("tool_use".into(), "b".into())
            ]
        );
        assert!(matches!(
            HfTokenizerConfig::parse(b"{\"chat_template\": 3}"),
            Err(TextError::ConfigField { .. })
        ));
        assert!(matches!(
            HfTokenizerConfig::parse(b"not json"),
            Err(TextError::Config { .. })
        ));
    }
}
