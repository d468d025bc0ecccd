//! The small files next to a Hugging Face checkpoint's weights (config, tokenizer, chat
//! template, ...): read once into memory, checked against the integrity manifest, and handed
//! out as those same verified bytes, so what is parsed is what was hashed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::LoadError;
use crate::integrity::Verifier;

/// Every side file a load reads when it is present, by path relative to the checkpoint
/// directory. A file not listed here is never read, so it need not be in a manifest.
pub const SIDE_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "quantize_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];

/// Verified bytes of the side files a load read, by relative path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideFiles {
    files: BTreeMap<String, Vec<u8>>,
}

impl SideFiles {
    /// Reads every present file of [`SIDE_FILES`] in `dir`, checking each against the
    /// manifest: listed, then its length before it is read (so a wrong file is not read
    /// whole), then the length and SHA-256 of the bytes read, which are the bytes kept.
    pub(crate) fn read(dir: &Path, verifier: Verifier<'_>) -> Result<SideFiles, LoadError> {
        let mut files = BTreeMap::new();
        for &name in SIDE_FILES {
            let path = dir.join(name);
            let Some(len) = regular_file_len(&path)? else {
                continue;
            };
            verifier.check_length(name, len)?;
            let bytes = std::fs::read(&path).map_err(|source| LoadError::Io {
                path: path.clone(),
                source,
            })?;
            verifier.check_bytes(name, &bytes)?;
            files.insert(name.to_owned(), bytes);
        }
        Ok(SideFiles { files })
    }

    /// The verified bytes of a side file, if the checkpoint has it.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(Vec::as_slice)
    }

    /// The side files read, in name order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

/// The names of the side files present in `dir` (what a load would read).
pub(crate) fn present(dir: &Path) -> Result<Vec<String>, LoadError> {
    let mut out = Vec::new();
    for &name in SIDE_FILES {
        if regular_file_len(&dir.join(name))?.is_some() {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// The length of a regular file (following symlinks, as the Hugging Face cache uses them), or
/// `None` when nothing is there.
pub(crate) fn regular_file_len(path: &Path) -> Result<Option<u64>, LoadError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(Some(m.len())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LoadError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}
