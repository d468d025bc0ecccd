//! A loaded checkpoint: the family's model, the weights exactly as stored, and the text services
//! built from the checkpoint's own tokenizer files.

use std::path::Path;
use std::sync::OnceLock;

use poot_load::{Checkpoint, ConfigSource, WeightStore};
use poot_models::{Model, ModelConfig, ModelError, Registry};
use poot_text::{HfTextFiles, TextError, TextServices};

use crate::guide::{GuideError, Guides};

pub use poot_load::{LoadOptions, Manifest};

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// No registered family runs this checkpoint (checked before any weight file is opened).
    #[error("unsupported model: {0}")]
    Unsupported(ModelError),
    /// The checkpoint's files could not be read or failed their checks.
    #[error(transparent)]
    Load(#[from] poot_load::LoadError),
    /// The family refused the checkpoint (a missing tensor, an unsupported config value).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The tokenizer or chat template could not be built.
    #[error(transparent)]
    Text(#[from] TextError),
    /// The model could not be narrowed to the positions asked for (more than it has).
    #[error("narrowing the model to the capacity in use: {0}")]
    Narrow(poot_models::TraceError),
    /// The tokenizer has ids past the embedding's rows: encoding some text would read outside
    /// the embedding. The tokenizer belongs to another model (or the embedding is truncated).
    #[error(
        "the tokenizer has {tokenizer_ids} ids, more than the {embedding_rows} rows of the embedding"
    )]
    TokenizerVocab {
        tokenizer_ids: usize,
        embedding_rows: usize,
    },
    /// The checkpoint carries no tokenizer (a weights-only directory).
    #[error("the checkpoint has no tokenizer (tokenizer.json or GGUF tokenizer metadata)")]
    NoTokenizer,
    /// Guided decoding could not be set up for this tokenizer, or a constraint is invalid.
    #[error(transparent)]
    Guide(#[from] GuideError),
}

/// Load options that check every file a load reads against the integrity manifest at
/// `manifest_path` (lengths and SHA-256, see [`Manifest`]) before any tensor is read.
pub fn verifying(manifest_path: &Path) -> Result<LoadOptions, HandleError> {
    let bytes = std::fs::read(manifest_path).map_err(|source| poot_load::LoadError::Io {
        path: manifest_path.to_path_buf(),
        source,
    })?;
    Ok(LoadOptions {
        integrity: Some(Manifest::from_json(&bytes)?),
    })
}

/// A checkpoint ready to run: shared by reference, one handle can back several drivers.
pub struct ModelHandle {
    model: Box<dyn Model>,
    checkpoint: Checkpoint,
    text: Option<TextServices>,
    /// The token trie guided decoding reads, built on first use.
    guides: OnceLock<Guides>,
}

impl ModelHandle {
    /// Loads `path` (a Hugging Face directory or a GGUF file): resolves its family from the
    /// config alone, then reads the weights as stored, builds the model and its text services.
    pub fn load(
        path: &Path,
        registry: &Registry,
        options: &LoadOptions,
    ) -> Result<ModelHandle, HandleError> {
        let config = poot_load::peek_config(path)?;
        let entry = registry
            .resolve(&config)
            .map_err(HandleError::Unsupported)?;
        let checkpoint = poot_load::load(path, options)?;
        // The checkpoint as the index: it finds the quantized linears its config describes.
        let model = (entry.build)(checkpoint.config(), &checkpoint)?.model;
        let fallback = model.config().chat_format;
        let text = match checkpoint.config() {
            ConfigSource::Gguf(meta) => Some(TextServices::from_gguf(meta, fallback)?),
            ConfigSource::HuggingFace(_) => match checkpoint.read_side_file("tokenizer.json") {
                Some(tokenizer_json) => Some(TextServices::from_hf(
                    &HfTextFiles {
                        tokenizer_json,
                        tokenizer_config_json: checkpoint.read_side_file("tokenizer_config.json"),
                        chat_template_jinja: checkpoint.read_side_file("chat_template.jinja"),
                    },
                    fallback,
                )?),
                None => None,
            },
        };
        // An embedding may have spare rows (padded for alignment), never fewer than the ids.
        if let Some(t) = &text {
            let tokenizer_ids = t.tokenizer().vocab_size();
            let embedding_rows = model.config().vocab_size;
            if tokenizer_ids > embedding_rows {
                return Err(HandleError::TokenizerVocab {
                    tokenizer_ids,
                    embedding_rows,
                });
            }
        }
        Ok(ModelHandle {
            model,
            checkpoint,
            text,
            guides: OnceLock::new(),
        })
    }

    /// Narrows the model to the first `positions` positions, the largest KV capacity the
    /// caller will use: rotary tables are then computed and uploaded for those only, however
    /// long a context the checkpoint declares. Refused beyond the model's positions.
    pub fn narrow_positions(&mut self, positions: usize) -> Result<(), HandleError> {
        self.model
            .narrow_positions(positions)
            .map_err(HandleError::Narrow)
    }

    pub fn model(&self) -> &dyn Model {
        self.model.as_ref()
    }

    /// Family, vocabulary, positions, end-of-sequence ids.
    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    /// The tokenizer and chat template.
    pub fn text(&self) -> Result<&TextServices, HandleError> {
        self.text.as_ref().ok_or(HandleError::NoTokenizer)
    }

    /// Every id that ends generation: the tokenizer's end-of-generation tokens and the
    /// config's end-of-sequence ids.
    pub fn end_of_generation(&self) -> Result<Vec<u32>, HandleError> {
        let sp = self.text()?.tokenizer().special_tokens();
        let mut ids = sp.eog.clone();
        ids.extend(sp.eos);
        ids.extend(self.config().eos_ids.iter().copied());
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The token trie guided decoding compiles constraints against, built on first use (a
    /// pass over the vocabulary, then shared by every request).
    pub fn guides(&self) -> Result<&Guides, HandleError> {
        if let Some(g) = self.guides.get() {
            return Ok(g);
        }
        let built = Guides::new(
            self.text()?.tokenizer(),
            self.config().vocab_size,
            &self.end_of_generation()?,
        )?;
        // Another thread may have won the race; either trie is the same.
        let _ = self.guides.set(built);
        Ok(self.guides.get().expect("set just above"))
    }

    /// The weights as stored.
    pub fn store(&self) -> &WeightStore {
        self.checkpoint.store()
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }
}
