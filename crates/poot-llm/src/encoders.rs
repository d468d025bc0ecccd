//! Encoders on the device: an encoder's `encode` step over padded rows, then the host side.
//!
//! - [`SentenceEncoder`]: mean pooling over the real tokens and L2 normalization (as
//!   sentence-transformers does for models like all-MiniLM-L6-v2);
//! - [`CrossEncoder`]: a sequence classifier with one label scoring (query, document) pairs
//!   encoded as one input, with the activation sentence-transformers' `CrossEncoder.predict`
//!   applies by default (the sigmoid, unless the checkpoint's config names another), and
//!   documents ranked by their scores.

use std::path::Path;
use std::sync::Arc;

use poot_executor::{EntryId, ExecError, ExecutableId, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Slot, TraceLimits};
use poot_graph_plan::PlanError;
use poot_models::{ModelKind, Registry, StepSpec};

use crate::driver::{DriverError, entry_label};
use crate::handle::{LoadOptions, ModelHandle};
use crate::weights::HandleWeights;

/// Padded lengths the encoder prepares; a text is padded to the first that holds it.
const LENGTH_BUCKETS: [usize; 6] = [16, 32, 64, 128, 256, 512];

/// Why an embedding request failed.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The checkpoint is not an encoder.
    #[error("`{family}` is not an encoder model")]
    NotEncoder { family: &'static str },
    /// More texts than the rows prepared at load.
    #[error("{texts} texts in one call; the encoder was prepared for {rows}")]
    TooManyTexts { texts: usize, rows: usize },
    /// A cross-encoder is needed and the encoder returns hidden states, not scores (an
    /// embedding model).
    #[error("`{family}` is not a cross-encoder: its encode step returns hidden states, not scores")]
    NotCrossEncoder { family: &'static str },
    /// A reranker scores with one label; this classifier has several (an NLI model).
    #[error("the classifier has {labels} labels; reranking needs a one-label cross-encoder")]
    NotOneLabel { labels: usize },
    /// The checkpoint's sentence-transformers config names an activation poot does not apply.
    #[error("sentence_transformers.activation_fn `{name}` is not supported (Sigmoid, Identity)")]
    Activation { name: String },
    /// A pair could not be tokenized (the query leaves no room for a document, or the
    /// tokenizer cannot join pairs).
    #[error("{0}")]
    Pair(#[from] poot_text::TokenizerError),
    /// A pre-encoded pair is longer than the longest prepared length.
    #[error("a pair of {tokens} tokens; the cross-encoder takes at most {max_tokens}")]
    PairTooLong { tokens: usize, max_tokens: usize },
    /// Reranking was asked with no documents.
    #[error("no documents to rank")]
    NoDocuments,
}

impl From<crate::handle::HandleError> for EncoderError {
    fn from(e: crate::handle::HandleError) -> EncoderError {
        EncoderError::Driver(e.into())
    }
}

impl From<poot_executor::ExecError> for EncoderError {
    fn from(e: poot_executor::ExecError) -> EncoderError {
        EncoderError::Driver(e.into())
    }
}

impl From<poot_models::TraceError> for EncoderError {
    fn from(e: poot_models::TraceError) -> EncoderError {
        EncoderError::Driver(e.into())
    }
}

/// An encoder's weights on one executor with its encode entries: one per prepared length
/// bucket, each for `rows` rows.
struct Prepared {
    handle: Arc<ModelHandle>,
    exec: Box<dyn Executor>,
    exe: ExecutableId,
    rows: usize,
    /// One entry per prepared length bucket.
    entries: Vec<(usize, EntryId)>,
    /// The dimensions of an encode step's output: `[rows, tokens, hidden]` (hidden states) or
    /// `[rows, labels]` (a sequence classifier's scores).
    output_dims: Vec<usize>,
}

impl Prepared {
    /// Loads an encoder checkpoint and prepares its encode entries (each length bucket up to the
    /// model's positions and `max_tokens` that fits the device, for `rows` rows).
    fn load(
        path: &Path,
        mut exec: Box<dyn Executor>,
        rows: usize,
        max_tokens: usize,
        options: &LoadOptions,
    ) -> Result<Prepared, EncoderError> {
        let registry = Registry::builtin()
            .map_err(|e| DriverError::from(crate::handle::HandleError::Model(e)))?;
        let handle = Arc::new(ModelHandle::load(path, &registry, options)?);
        if handle.config().kind != ModelKind::Encoder {
            return Err(EncoderError::NotEncoder {
                family: handle.config().family,
            });
        }
        let exe = exec.load_weights(Box::new(HandleWeights::new(Arc::clone(&handle))))?;
        let rows = rows.max(1);
        let mut entries = Vec::new();
        let mut output_dims = Vec::new();
        let limit = handle
            .config()
            .max_positions
            .min(max_tokens.max(LENGTH_BUCKETS[0]));
        for len in LENGTH_BUCKETS.into_iter().filter(|&l| l <= limit) {
            let spec = StepSpec::encode(rows, len);
            let graph = handle
                .model()
                .trace(&spec, TraceLimits::standard((rows * len) as u64))?;
            if output_dims.is_empty()
                && let Some(ty) = graph.outputs().primary.first().and_then(|&v| graph.ty(v))
            {
                output_dims = ty.shape.dims().to_vec();
            }
            match exec.add_entry(exe, &graph, &entry_label(&spec, None)) {
                Ok(entry) => entries.push((len, entry)),
                // A longer bucket that does not fit the device's buffers or memory ends the
                // prepared set; longer texts are truncated to the longest prepared length.
                Err(ExecError::Plan(e))
                    if !entries.is_empty()
                        && matches!(
                            e.root(),
                            PlanError::ValueTooLarge { .. } | PlanError::OutOfMemory { .. }
                        ) =>
                {
                    break;
                }
                Err(ExecError::OutOfMemory { .. }) if !entries.is_empty() => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Prepared {
            handle,
            exec,
            exe,
            rows,
            entries,
            output_dims,
        })
    }

    /// The longest prepared length.
    fn max_len(&self) -> usize {
        self.entries.last().map(|(l, _)| *l).unwrap_or(0)
    }

    /// Runs one encode step over up to `rows` token rows, each with its token types, padded
    /// to the first prepared length that holds the longest; returns the step's first output
    /// and the padded length. Rows longer than every prepared length are not run (`None`).
    fn run(
        &mut self,
        ids: &[(Vec<u32>, Vec<u32>)],
    ) -> Result<Option<(Vec<f32>, usize)>, EncoderError> {
        if ids.len() > self.rows {
            return Err(EncoderError::TooManyTexts {
                texts: ids.len(),
                rows: self.rows,
            });
        }
        let longest = ids.iter().map(|(t, _)| t.len()).max().unwrap_or(1).max(1);
        let Some(&(len, entry)) = self.entries.iter().find(|(l, _)| *l >= longest) else {
            return Ok(None);
        };
        let rows = self.rows;
        let mut tokens = vec![0i32; rows * len];
        let mut mask = vec![0i32; rows * len];
        let mut types = vec![0i32; rows * len];
        for (r, (row, row_types)) in ids.iter().enumerate() {
            for (p, &t) in row.iter().enumerate() {
                tokens[r * len + p] = t as i32;
                mask[r * len + p] = 1;
                types[r * len + p] = row_types.get(p).map_or(0, |&t| t as i32);
            }
        }
        let pos: Vec<i32> = (0..rows).flat_map(|_| 0..len as i32).collect();
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, &tokens);
        inputs.set_i32(Slot::Pos, &pos);
        inputs.set_i32(Slot::Named("token_mask".to_string()), &mask);
        inputs.set_i32(Slot::Named("token_type".to_string()), &types);
        let mut out = StepOutputs::default();
        self.exec.step(entry, &inputs, &mut out)?;
        Ok(Some((out.f32(0).unwrap_or_default(), len)))
    }
}

/// An embedding model on one executor, prepared for up to `rows` texts per call.
pub struct SentenceEncoder {
    prepared: Prepared,
}

impl SentenceEncoder {
    /// Loads an encoder checkpoint and prepares its encode entries (each length bucket up to the
    /// model's positions that fits the device, for `rows` rows), so embedding compiles nothing.
    pub fn load(
        path: &Path,
        exec: Box<dyn Executor>,
        rows: usize,
    ) -> Result<SentenceEncoder, EncoderError> {
        SentenceEncoder::load_up_to(path, exec, rows, usize::MAX)
    }

    /// [`SentenceEncoder::load`] preparing lengths only up to `max_tokens` (fewer entries, a
    /// faster load, longer texts truncated).
    pub fn load_up_to(
        path: &Path,
        exec: Box<dyn Executor>,
        rows: usize,
        max_tokens: usize,
    ) -> Result<SentenceEncoder, EncoderError> {
        SentenceEncoder::load_with(path, exec, rows, max_tokens, &LoadOptions::default())
    }

    /// [`SentenceEncoder::load_up_to`] under `options` (an integrity manifest, say), as a
    /// generation model's [`ModelHandle::load`] takes them.
    pub fn load_with(
        path: &Path,
        exec: Box<dyn Executor>,
        rows: usize,
        max_tokens: usize,
        options: &LoadOptions,
    ) -> Result<SentenceEncoder, EncoderError> {
        Ok(SentenceEncoder {
            prepared: Prepared::load(path, exec, rows, max_tokens, options)?,
        })
    }

    pub fn handle(&self) -> &Arc<ModelHandle> {
        &self.prepared.handle
    }

    /// L2-normalized mean-pooled embeddings of `texts`, one per text. Texts longer than the
    /// longest prepared length are truncated to it (keeping the final separator token).
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.embed_with(texts, true)
    }

    /// Mean-pooled embeddings of `texts`, L2-normalized when `normalize` (a model whose
    /// sentence-transformers pipeline has no Normalize module is used without it).
    pub fn embed_with(
        &mut self,
        texts: &[&str],
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        if texts.len() > self.prepared.rows {
            return Err(EncoderError::TooManyTexts {
                texts: texts.len(),
                rows: self.prepared.rows,
            });
        }
        let max_len = self.prepared.max_len();
        let text = self.prepared.handle.text()?;
        let mut ids: Vec<(Vec<u32>, Vec<u32>)> = Vec::with_capacity(texts.len());
        for t in texts {
            let mut v = text.encode(t).map_err(DriverError::from)?;
            if v.len() > max_len {
                let last = v.last().copied();
                v.truncate(max_len);
                if let (Some(l), Some(end)) = (last, v.last_mut()) {
                    *end = l;
                }
            }
            ids.push((v, Vec::new()));
        }
        let Some((hidden, len)) = self.prepared.run(&ids)? else {
            return Ok(Vec::new());
        };
        let d = self.prepared.handle.config().hidden_size;
        let mut vectors = Vec::with_capacity(ids.len());
        for (r, (row, _)) in ids.iter().enumerate() {
            let mut acc = vec![0f64; d];
            for p in 0..row.len() {
                let base = (r * len + p) * d;
                for (j, a) in acc.iter_mut().enumerate() {
                    *a += hidden.get(base + j).copied().unwrap_or(0.0) as f64;
                }
            }
            let n = row.len().max(1) as f64;
            let norm = if normalize {
                acc.iter()
                    .map(|x| (x / n) * (x / n))
                    .sum::<f64>()
                    .sqrt()
                    .max(1e-12)
            } else {
                1.0
            };
            vectors.push(acc.iter().map(|x| (x / n / norm) as f32).collect());
        }
        Ok(vectors)
    }

    /// The executable this encoder's weights live in.
    pub fn executable(&self) -> ExecutableId {
        self.prepared.exe
    }
}

/// The function a cross-encoder's logit passes through to become its score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreActivation {
    /// `1 / (1 + e^-x)`: sentence-transformers' default for one label.
    Sigmoid,
    /// The raw logit.
    Identity,
}

impl ScoreActivation {
    /// What sentence-transformers' `CrossEncoder` applies to a checkpoint whose config is
    /// `config`: the `sentence_transformers.activation_fn` it saved, else the sigmoid (one
    /// label).
    pub fn of_config(config: Option<&serde_json::Value>) -> Result<ScoreActivation, EncoderError> {
        let named = config
            .and_then(|c| c.get("sentence_transformers"))
            .and_then(|s| s.get("activation_fn"))
            .and_then(|a| a.as_str());
        match named {
            None => Ok(ScoreActivation::Sigmoid),
            Some(name) if name.ends_with("Sigmoid") => Ok(ScoreActivation::Sigmoid),
            Some(name) if name.ends_with("Identity") => Ok(ScoreActivation::Identity),
            Some(name) => Err(EncoderError::Activation {
                name: name.to_owned(),
            }),
        }
    }

    pub fn apply(self, logit: f32) -> f32 {
        match self {
            ScoreActivation::Sigmoid => (1.0 / (1.0 + (-(logit as f64)).exp())) as f32,
            ScoreActivation::Identity => logit,
        }
    }
}

/// One document's place in a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// Its index among the documents given.
    pub index: usize,
    pub score: f32,
}

/// A cross-encoder (a one-label sequence classifier such as a BERT reranker) on one executor,
/// prepared for `rows` pairs per step.
pub struct CrossEncoder {
    prepared: Prepared,
    activation: ScoreActivation,
}

impl CrossEncoder {
    /// Loads a cross-encoder checkpoint and prepares its encode entries for `rows` pairs per
    /// step (more pairs run in several steps).
    pub fn load(
        path: &Path,
        exec: Box<dyn Executor>,
        rows: usize,
    ) -> Result<CrossEncoder, EncoderError> {
        CrossEncoder::load_with(path, exec, rows, usize::MAX, &LoadOptions::default())
    }

    /// [`CrossEncoder::load`] preparing pair lengths only up to `max_tokens`, under `options`.
    /// An encoder whose step returns hidden states (an embedding model) is refused, and so is a
    /// classifier with more than one label.
    pub fn load_with(
        path: &Path,
        exec: Box<dyn Executor>,
        rows: usize,
        max_tokens: usize,
        options: &LoadOptions,
    ) -> Result<CrossEncoder, EncoderError> {
        let prepared = Prepared::load(path, exec, rows, max_tokens, options)?;
        let family = prepared.handle.config().family;
        let labels = match prepared.output_dims.as_slice() {
            [_, labels] => *labels,
            _ => return Err(EncoderError::NotCrossEncoder { family }),
        };
        if labels != 1 {
            return Err(EncoderError::NotOneLabel { labels });
        }
        let activation =
            ScoreActivation::of_config(prepared.handle.checkpoint().config().as_hugging_face())?;
        Ok(CrossEncoder {
            prepared,
            activation,
        })
    }

    pub fn handle(&self) -> &Arc<ModelHandle> {
        &self.prepared.handle
    }

    /// The most tokens one pair may have (its document is cut to fit).
    pub fn max_tokens(&self) -> usize {
        self.prepared.max_len()
    }

    pub fn activation(&self) -> ScoreActivation {
        self.activation
    }

    /// The token ids and types of `(first, second)` as the model reads them, the second text
    /// cut to [`CrossEncoder::max_tokens`].
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
    ) -> Result<poot_text::PairEncoding, EncoderError> {
        let text = self.prepared.handle.text()?;
        Ok(text
            .tokenizer()
            .encode_pair(first, second, self.max_tokens())?)
    }

    /// The score of each `(query, document)` pair, in order.
    pub fn score(&mut self, pairs: &[(&str, &str)]) -> Result<Vec<f32>, EncoderError> {
        let mut encoded = Vec::with_capacity(pairs.len());
        for (first, second) in pairs {
            encoded.push(self.encode_pair(first, second)?);
        }
        self.score_encoded(&encoded)
    }

    /// The score of each pair [`CrossEncoder::encode_pair`] encoded, in order, in steps of the
    /// rows prepared at load. A pair longer than [`CrossEncoder::max_tokens`] is refused.
    pub fn score_encoded(
        &mut self,
        pairs: &[poot_text::PairEncoding],
    ) -> Result<Vec<f32>, EncoderError> {
        let max = self.max_tokens();
        if let Some(long) = pairs.iter().find(|p| p.ids.len() > max) {
            return Err(EncoderError::PairTooLong {
                tokens: long.ids.len(),
                max_tokens: max,
            });
        }
        let rows: Vec<(Vec<u32>, Vec<u32>)> = pairs
            .iter()
            .map(|p| (p.ids.clone(), p.type_ids.clone()))
            .collect();
        let mut scores = Vec::with_capacity(pairs.len());
        for chunk in rows.chunks(self.prepared.rows) {
            let Some((logits, _)) = self.prepared.run(chunk)? else {
                return Err(EncoderError::PairTooLong {
                    tokens: chunk.iter().map(|(t, _)| t.len()).max().unwrap_or(0),
                    max_tokens: max,
                });
            };
            for r in 0..chunk.len() {
                let logit = logits.get(r).copied().unwrap_or(f32::NAN);
                scores.push(self.activation.apply(logit));
            }
        }
        Ok(scores)
    }

    /// `documents` scored against `query`, best first (ties keep the documents' order).
    pub fn rerank(&mut self, query: &str, documents: &[&str]) -> Result<Vec<Ranked>, EncoderError> {
        if documents.is_empty() {
            return Err(EncoderError::NoDocuments);
        }
        let pairs: Vec<(&str, &str)> = documents.iter().map(|d| (query, *d)).collect();
        let scores = self.score(&pairs)?;
        Ok(rank(&scores))
    }
}

/// Indices of `scores`, highest score first (a stable sort: ties keep their order; NaN last).
pub fn rank(scores: &[f32]) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Ranked { index, score })
        .collect();
    ranked.sort_by(|a, b| {
        let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
        key(b.score).total_cmp(&key(a.score))
    });
    ranked
}
