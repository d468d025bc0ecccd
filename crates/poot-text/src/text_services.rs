//! A model's text services: its tokenizer and chat template(s), built from a GGUF's metadata
//! or from a Hugging Face directory's tokenizer files.

use std::path::Path;

use poot_load::gguf::GgufMetadata;
use serde_json::Value as Json;

use crate::chat_format::{builtin_chat_template, known_keys};
use crate::chat_prompt::{self, ChatOptions, ChatTokens, RenderedChat};
use crate::chat_template::ChatTemplate;
use crate::error::{ChatError, TextError, TokenizerError};
use crate::gguf_tokenizer::GgufTokenizer;
use crate::gguf_vocab::GgufVocab;
use crate::hf_config::HfTokenizerConfig;
use crate::hf_tokenizer::HfTokenizer;
use crate::stream_decoder::StreamDecoder;
use crate::tokenizer::{EncodeOptions, Tokenizer};

/// The bytes of a Hugging Face checkpoint's tokenizer files, as the loader verified them.
#[derive(Clone, Copy, Debug)]
pub struct HfTextFiles<'a> {
    /// `tokenizer.json`.
    pub tokenizer_json: &'a [u8],
    /// `tokenizer_config.json`, when the checkpoint has one.
    pub tokenizer_config_json: Option<&'a [u8]>,
    /// `chat_template.jinja`: newer checkpoints keep the default template there, and it wins
    /// over one in `tokenizer_config.json`.
    pub chat_template_jinja: Option<&'a [u8]>,
}

/// Tokenizer plus chat templates.
#[derive(Debug)]
pub struct TextServices {
    tokenizer: Tokenizer,
    /// `(name, template)`, the default one named `default`.
    templates: Vec<ChatTemplate>,
    tokens: ChatTokens,
}

impl TextServices {
    /// From a GGUF file's metadata. `fallback_format` names a built-in chat format used when
    /// the file has no `tokenizer.chat_template` (see [`builtin_chat_formats`](crate::builtin_chat_formats)).
    pub fn from_gguf(
        meta: &GgufMetadata,
        fallback_format: Option<&str>,
    ) -> Result<TextServices, TextError> {
        TextServices::from_gguf_vocab(&GgufVocab::from_metadata(meta)?, fallback_format)
    }

    /// From an already read GGUF vocabulary.
    pub fn from_gguf_vocab(
        vocab: &GgufVocab,
        fallback_format: Option<&str>,
    ) -> Result<TextServices, TextError> {
        let tokenizer = GgufTokenizer::new(vocab)?;
        let text = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).map(str::to_owned);
        let sp = tokenizer.special_tokens();
        let tokens = ChatTokens {
            bos: text(sp.bos),
            eos: text(sp.eos),
            unk: text(sp.unk),
            pad: text(sp.pad),
        };
        let mut sources: Vec<(String, String)> = Vec::new();
        if let Some(t) = &vocab.chat_template {
            sources.push(("default".to_owned(), t.clone()));
        }
        sources.extend(vocab.named_chat_templates.iter().cloned());
        let templates = compile(sources, fallback_format)?;
        Ok(TextServices {
            tokenizer: Tokenizer::Gguf(Box::new(tokenizer)),
            templates,
            tokens,
        })
    }

    /// From a Hugging Face checkpoint's tokenizer files.
    pub fn from_hf(
        files: &HfTextFiles<'_>,
        fallback_format: Option<&str>,
    ) -> Result<TextServices, TextError> {
        let config = match files.tokenizer_config_json {
            Some(bytes) => HfTokenizerConfig::parse(bytes)?,
            None => HfTokenizerConfig::default(),
        };
        let tokenizer = HfTokenizer::from_bytes(files.tokenizer_json, &config.specials)?;
        let mut sources = config.templates;
        if let Some(jinja) = files.chat_template_jinja {
            let source = String::from_utf8_lossy(jinja).into_owned();
            sources.retain(|(name, _)| name != "default");
            sources.insert(0, ("default".to_owned(), source));
        }
        let templates = compile(sources, fallback_format)?;
        let s = &config.specials;
        let tokens = ChatTokens {
            bos: s.bos.clone(),
            eos: s.eos.clone(),
            unk: s.unk.clone(),
            pad: s.pad.clone(),
        };
        Ok(TextServices {
            tokenizer: Tokenizer::Hf(Box::new(tokenizer)),
            templates,
            tokens,
        })
    }

    /// Reads `tokenizer.json`, and `tokenizer_config.json` and `chat_template.jinja` when
    /// present, from a checkpoint directory. (Loaders that verify file digests should read the
    /// bytes themselves and call [`TextServices::from_hf`].)
    pub fn from_dir(dir: &Path, fallback_format: Option<&str>) -> Result<TextServices, TextError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| TextError::Io { path, source })
        };
        let optional = |name: &str| {
            if dir.join(name).exists() {
                read(name).map(Some)
            } else {
                Ok(None)
            }
        };
        let tokenizer_json = read("tokenizer.json")?;
        let config = optional("tokenizer_config.json")?;
        let jinja = optional("chat_template.jinja")?;
        TextServices::from_hf(
            &HfTextFiles {
                tokenizer_json: &tokenizer_json,
                tokenizer_config_json: config.as_deref(),
                chat_template_jinja: jinja.as_deref(),
            },
            fallback_format,
        )
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The default chat template, when the model has one (or a fallback format was named).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.templates.iter().find(|t| t.name() == "default")
    }

    /// Every chat template, the default one named `default`.
    pub fn chat_templates(&self) -> &[ChatTemplate] {
        &self.templates
    }

    /// Encodes a user prompt: sequence tokens added, control-token spellings kept as text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.tokenizer.encode(text, EncodeOptions::default())
    }

    /// Decodes generated ids to text, control tokens omitted.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.tokenizer.decode(ids, true)
    }

    /// A streaming decoder for generated ids, control tokens omitted.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        self.tokenizer.stream_decoder(true)
    }

    /// Renders OpenAI-style `messages` (and `tools`) with the generation prompt added.
    pub fn render_chat_value(
        &self,
        messages: &Json,
        tools: Option<&Json>,
    ) -> Result<RenderedChat, ChatError> {
        self.render_chat(messages, tools, &ChatOptions::default())
    }

    /// Renders with explicit options. With tools and no template named, a `tool_use` template
    /// is preferred when the model ships one (as transformers does).
    pub fn render_chat(
        &self,
        messages: &Json,
        tools: Option<&Json>,
        options: &ChatOptions,
    ) -> Result<RenderedChat, ChatError> {
        let template = self.pick_template(
            options.template_name.as_deref(),
            tools.is_some_and(|t| !t.is_null()),
        )?;
        chat_prompt::render_chat(
            template,
            &self.tokenizer,
            &self.tokens,
            messages,
            tools,
            options,
        )
    }

    /// Encodes a rendered prompt; control tokens a message spelled stay text.
    pub fn encode_chat(&self, rendered: &RenderedChat) -> Result<Vec<u32>, TokenizerError> {
        chat_prompt::encode_chat(&self.tokenizer, rendered)
    }

    fn pick_template(
        &self,
        name: Option<&str>,
        with_tools: bool,
    ) -> Result<&ChatTemplate, ChatError> {
        let names = || {
            self.templates
                .iter()
                .map(|t| t.name().to_owned())
                .collect::<Vec<_>>()
        };
        if let Some(name) = name {
            return self
                .templates
                .iter()
                .find(|t| t.name() == name)
                .ok_or_else(|| ChatError::UnknownTemplateName {
                    name: name.to_owned(),
                    available: names(),
                });
        }
        if self.templates.is_empty() {
            return Err(ChatError::NoTemplate {
                known: known_keys(),
            });
        }
        let by_name = |n: &str| self.templates.iter().find(|t| t.name() == n);
        let tool_use = if with_tools {
            by_name("tool_use")
        } else {
            None
        };
        tool_use
            .or_else(|| by_name("default"))
            .ok_or_else(|| ChatError::NoDefaultTemplate { names: names() })
    }
}

/// Compiles the shipped templates, or the named fallback format when none is shipped.
fn compile(
    sources: Vec<(String, String)>,
    fallback_format: Option<&str>,
) -> Result<Vec<ChatTemplate>, ChatError> {
    if sources.is_empty() {
        return match fallback_format {
            Some(key) => {
                let builtin = builtin_chat_template(key)?;
                Ok(vec![ChatTemplate::new("default", builtin.source())?])
            }
            None => Ok(Vec::new()),
        };
    }
    sources
        .iter()
        .map(|(name, source)| ChatTemplate::new(name, source))
        .collect()
}
