//! Reading a family's hyperparameters from either config source.
//!
//! A Hugging Face checkpoint spells a hyperparameter as a `config.json` key; a GGUF as a metadata
//! key under its architecture (`llama.embedding_length`). A family names both spellings once and
//! reads typed values; a missing or mistyped key is a typed error naming it.

use poot_load::gguf::{GgufMetadata, MetaArray, MetaValue};
use serde_json::Value;

use crate::error::ModelError;
use crate::limits::Limit;

/// Where a checkpoint's config comes from.
pub use poot_load::ConfigSource as RawConfig;

/// Which kind of checkpoint a config came from; a family reads weight names and some
/// conventions (rotary pairing, stored norm offsets) per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    HuggingFace,
    Gguf,
}

/// Typed access to one config, by a pair of spellings.
pub struct ConfigReader<'a> {
    raw: &'a RawConfig,
    arch: String,
}

/// A hyperparameter's two spellings: the `config.json` key and the GGUF key below the
/// architecture prefix (`""` where GGUF has none).
#[derive(Clone, Copy, Debug)]
pub struct Key {
    pub hf: &'static str,
    pub gguf: &'static str,
}

pub const fn key(hf: &'static str, gguf: &'static str) -> Key {
    Key { hf, gguf }
}

impl<'a> ConfigReader<'a> {
    pub fn new(raw: &'a RawConfig) -> ConfigReader<'a> {
        let arch = match raw {
            RawConfig::Gguf(m) => m.architecture().unwrap_or_default().to_string(),
            RawConfig::HuggingFace(_) => String::new(),
        };
        ConfigReader { raw, arch }
    }

    pub fn kind(&self) -> SourceKind {
        match self.raw {
            RawConfig::HuggingFace(_) => SourceKind::HuggingFace,
            RawConfig::Gguf(_) => SourceKind::Gguf,
        }
    }

    /// The GGUF metadata, when the config came from a GGUF.
    pub fn gguf(&self) -> Option<&'a GgufMetadata> {
        match self.raw {
            RawConfig::Gguf(m) => Some(m),
            RawConfig::HuggingFace(_) => None,
        }
    }

    /// The `config.json` value of a key, when the config came from Hugging Face.
    pub fn hf(&self, hf_key: &str) -> Option<&'a Value> {
        match self.raw {
            RawConfig::HuggingFace(v) => v.get(hf_key).filter(|v| !v.is_null()),
            RawConfig::Gguf(_) => None,
        }
    }

    fn spelled(&self, k: Key) -> String {
        match self.raw {
            RawConfig::HuggingFace(_) => k.hf.to_string(),
            RawConfig::Gguf(_)
                if k.gguf.starts_with("general.") || k.gguf.starts_with("tokenizer.") =>
            {
                k.gguf.to_string()
            }
            RawConfig::Gguf(_) => format!("{}.{}", self.arch, k.gguf),
        }
    }

    fn meta(&self, k: Key) -> Option<&'a MetaValue> {
        match self.raw {
            RawConfig::Gguf(m) if !k.gguf.is_empty() => m.get(&self.spelled(k)),
            _ => None,
        }
    }

    pub fn opt_usize(&self, k: Key) -> Result<Option<usize>, ModelError> {
        let bad = || ModelError::KeyType {
            key: self.spelled(k),
            expected: "a non-negative integer",
        };
        match self.raw {
            RawConfig::HuggingFace(_) => match self.hf(k.hf) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(bad),
            },
            RawConfig::Gguf(_) => match self.meta(k) {
                None => Ok(None),
                Some(v) => v
                    .as_integer()
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(bad),
            },
        }
    }

    pub fn usize(&self, k: Key) -> Result<usize, ModelError> {
        self.opt_usize(k)?.ok_or_else(|| ModelError::MissingKey {
            key: self.spelled(k),
        })
    }

    /// [`ConfigReader::opt_usize`], refused above `limit` before the caller sizes anything by it.
    pub fn opt_usize_at_most(&self, k: Key, limit: Limit) -> Result<Option<usize>, ModelError> {
        match self.opt_usize(k)? {
            Some(n) if n > limit.max => Err(ModelError::TooLarge {
                key: self.spelled(k),
                value: n as u64,
                limit: limit.max as u64,
                why: limit.why,
            }),
            n => Ok(n),
        }
    }

    /// [`ConfigReader::usize`], refused above `limit`.
    pub fn usize_at_most(&self, k: Key, limit: Limit) -> Result<usize, ModelError> {
        self.opt_usize_at_most(k, limit)?
            .ok_or_else(|| ModelError::MissingKey {
                key: self.spelled(k),
            })
    }

    /// A refusal of `value` at key `k`, which should be `expected`.
    pub fn out_of_range(
        &self,
        k: Key,
        value: impl std::fmt::Display,
        expected: &'static str,
    ) -> ModelError {
        ModelError::OutOfRange {
            key: self.spelled(k),
            value: value.to_string(),
            expected,
        }
    }

    /// The spelling of `k` in this config (`llama.block_count`, `num_hidden_layers`).
    pub fn key_name(&self, k: Key) -> String {
        self.spelled(k)
    }

    pub fn opt_f32(&self, k: Key) -> Result<Option<f32>, ModelError> {
        let bad = || ModelError::KeyType {
            key: self.spelled(k),
            expected: "a number",
        };
        match self.raw {
            RawConfig::HuggingFace(_) => match self.hf(k.hf) {
                None => Ok(None),
                Some(v) => v.as_f64().map(|f| Some(f as f32)).ok_or_else(bad),
            },
            RawConfig::Gguf(_) => match self.meta(k) {
                None => Ok(None),
                Some(MetaValue::F32(f)) => Ok(Some(*f)),
                Some(MetaValue::F64(f)) => Ok(Some(*f as f32)),
                Some(v) => v.as_integer().map(|n| Some(n as f32)).ok_or_else(bad),
            },
        }
    }

    pub fn f32(&self, k: Key) -> Result<f32, ModelError> {
        self.opt_f32(k)?.ok_or_else(|| ModelError::MissingKey {
            key: self.spelled(k),
        })
    }

    pub fn opt_bool(&self, k: Key) -> Result<Option<bool>, ModelError> {
        let bad = || ModelError::KeyType {
            key: self.spelled(k),
            expected: "a boolean",
        };
        match self.raw {
            RawConfig::HuggingFace(_) => match self.hf(k.hf) {
                None => Ok(None),
                Some(v) => v.as_bool().map(Some).ok_or_else(bad),
            },
            RawConfig::Gguf(_) => match self.meta(k) {
                None => Ok(None),
                Some(MetaValue::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(bad()),
            },
        }
    }

    pub fn opt_str(&self, k: Key) -> Result<Option<&'a str>, ModelError> {
        let bad = || ModelError::KeyType {
            key: self.spelled(k),
            expected: "a string",
        };
        match self.raw {
            RawConfig::HuggingFace(_) => match self.hf(k.hf) {
                None => Ok(None),
                Some(v) => v.as_str().map(Some).ok_or_else(bad),
            },
            RawConfig::Gguf(_) => match self.meta(k) {
                None => Ok(None),
                Some(MetaValue::String(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(bad()),
            },
        }
    }

    /// A number that a GGUF may state once per layer (an f32 array, as llama.cpp's
    /// `swiglu_clamp_exp`): its one value, or `Unsupported` when the layers' values differ.
    pub fn opt_f32_every_layer(&self, k: Key) -> Result<Option<f32>, ModelError> {
        let Some(MetaValue::Array(MetaArray::F32(values))) = self.meta(k) else {
            return self.opt_f32(k);
        };
        match values.split_first() {
            None => Ok(None),
            Some((first, rest)) if rest.iter().all(|v| v.to_bits() == first.to_bits()) => {
                Ok(Some(*first))
            }
            Some(_) => Err(self.unsupported(k, format!("{values:?}"), "one value for every layer")),
        }
    }

    /// A list of integers (`eos_token_id` may be one id or several).
    pub fn opt_ids(&self, k: Key) -> Result<Vec<u32>, ModelError> {
        let bad = || ModelError::KeyType {
            key: self.spelled(k),
            expected: "a token id or a list of ids",
        };
        let one = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
        match self.raw {
            RawConfig::HuggingFace(_) => match self.hf(k.hf) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items.iter().map(|v| one(v).ok_or_else(bad)).collect(),
                Some(v) => Ok(vec![one(v).ok_or_else(bad)?]),
            },
            RawConfig::Gguf(_) => match self.meta(k) {
                None => Ok(Vec::new()),
                Some(v) => Ok(vec![
                    v.as_integer()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(bad)?,
                ]),
            },
        }
    }

    /// A refusal for a value the family does not support.
    pub fn unsupported(
        &self,
        k: Key,
        value: impl std::fmt::Display,
        supported: &'static str,
    ) -> ModelError {
        ModelError::Unsupported {
            key: self.spelled(k),
            value: value.to_string(),
            supported,
        }
    }
}
