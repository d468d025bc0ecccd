//! The registry: which family runs a checkpoint, decided from its config key before any weight
//! is read.

use crate::config::{RawConfig, SourceKind};
use crate::error::ModelError;
use crate::families;
use crate::model::ModelParts;
use crate::weights::TensorIndex;

/// One shipped family, as data.
pub struct FamilyEntry {
    /// The registry key (`llama`, `gemma3`).
    pub family: &'static str,
    /// The config keys it runs: a Hugging Face `model_type`, a GGUF `general.architecture`.
    pub keys: &'static [(SourceKind, &'static str)],
    pub build: fn(&RawConfig, &dyn TensorIndex) -> Result<ModelParts, ModelError>,
}

/// Every shipped family. A new family is one row here.
pub const SHIPPED: &[FamilyEntry] = &[
    families::llama::ENTRY,
    families::qwen2::ENTRY,
    families::qwen3::ENTRY,
    families::mixtral::ENTRY,
    families::qwen3moe::ENTRY,
    families::gemma3::ENTRY,
    families::bert::ENTRY,
    families::olmoe::ENTRY,
    families::granite::ENTRY,
    families::granitemoe::ENTRY,
    families::gemma2::ENTRY,
    families::olmo2::ENTRY,
    families::qwen2moe::ENTRY,
    families::smollm3::ENTRY,
    families::phi3::ENTRY,
    families::gpt_oss::ENTRY,
    families::mpt::ENTRY,
    families::bloom::ENTRY,
];

/// An index of families by config key.
pub struct Registry {
    entries: &'static [FamilyEntry],
}

impl Registry {
    /// The shipped families, checked for duplicate keys.
    pub fn builtin() -> Result<Registry, ModelError> {
        Registry::new(SHIPPED)
    }

    /// A registry over `entries`; a key claimed twice is an error.
    pub fn new(entries: &'static [FamilyEntry]) -> Result<Registry, ModelError> {
        for (i, a) in entries.iter().enumerate() {
            for b in &entries[i + 1..] {
                for key in a.keys {
                    if b.keys.contains(key) {
                        return Err(ModelError::DuplicateKey {
                            source_kind: kind_name(key.0),
                            key: key.1.to_string(),
                            first: a.family,
                            second: b.family,
                        });
                    }
                }
            }
            for (j, key) in a.keys.iter().enumerate() {
                if a.keys[j + 1..].contains(key) {
                    return Err(ModelError::DuplicateKey {
                        source_kind: kind_name(key.0),
                        key: key.1.to_string(),
                        first: a.family,
                        second: a.family,
                    });
                }
            }
        }
        Ok(Registry { entries })
    }

    pub fn entries(&self) -> &'static [FamilyEntry] {
        self.entries
    }

    /// The family registered for a config's key (`model_type` or `general.architecture`).
    pub fn resolve(&self, raw: &RawConfig) -> Result<&'static FamilyEntry, ModelError> {
        let (kind, key) = config_key(raw)?;
        self.entries
            .iter()
            .find(|e| e.keys.contains(&(kind, key)))
            .ok_or_else(|| ModelError::Unregistered {
                source_kind: kind_name(kind),
                key: key.to_string(),
            })
    }

    /// The family entry with registry key `family`.
    pub fn family(&self, family: &str) -> Option<&'static FamilyEntry> {
        self.entries.iter().find(|e| e.family == family)
    }
}

fn kind_name(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::HuggingFace => "model_type",
        SourceKind::Gguf => "general.architecture",
    }
}

/// The key a config resolves by.
pub fn config_key(raw: &RawConfig) -> Result<(SourceKind, &str), ModelError> {
    match raw {
        RawConfig::HuggingFace(v) => {
            let t = v.get("model_type").ok_or(ModelError::MissingKey {
                key: "model_type".into(),
            })?;
            let t = t.as_str().ok_or(ModelError::KeyType {
                key: "model_type".into(),
                expected: "a string",
            })?;
            Ok((SourceKind::HuggingFace, t))
        }
        RawConfig::Gguf(m) => Ok((SourceKind::Gguf, m.architecture()?)),
    }
}
