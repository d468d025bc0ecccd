//! Sentence embeddings on the device: an encoder's `encode` step over padded rows, then mean
//! pooling over the real tokens and L2 normalization on the host (as sentence-transformers does
//! for models like all-MiniLM-L6-v2).

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

/// An embedding model on one executor, prepared for up to `rows` texts per call.
pub struct SentenceEncoder {
    handle: Arc<ModelHandle>,
    exec: Box<dyn Executor>,
    exe: ExecutableId,
    rows: usize,
    /// One entry per prepared length bucket.
    entries: Vec<(usize, EntryId)>,
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
        mut exec: Box<dyn Executor>,
        rows: usize,
        max_tokens: usize,
        options: &LoadOptions,
    ) -> Result<SentenceEncoder, EncoderError> {
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
        let limit = handle
            .config()
            .max_positions
            .min(max_tokens.max(LENGTH_BUCKETS[0]));
        for len in LENGTH_BUCKETS.into_iter().filter(|&l| l <= limit) {
            let spec = StepSpec::encode(rows, len);
            let graph = handle
                .model()
                .trace(&spec, TraceLimits::standard((rows * len) as u64))?;
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
        Ok(SentenceEncoder {
            handle,
            exec,
            exe,
            rows,
            entries,
        })
    }

    pub fn handle(&self) -> &Arc<ModelHandle> {
        &self.handle
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
        if texts.len() > self.rows {
            return Err(EncoderError::TooManyTexts {
                texts: texts.len(),
                rows: self.rows,
            });
        }
        let max_len = self.entries.last().map(|(l, _)| *l).unwrap_or(0);
        let text = self.handle.text()?;
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(texts.len());
        for t in texts {
            let mut v = text.encode(t).map_err(DriverError::from)?;
            if v.len() > max_len {
                let last = v.last().copied();
                v.truncate(max_len);
                if let (Some(l), Some(end)) = (last, v.last_mut()) {
                    *end = l;
                }
            }
            ids.push(v);
        }
        let longest = ids.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let Some(&(len, entry)) = self.entries.iter().find(|(l, _)| *l >= longest) else {
            return Ok(Vec::new());
        };
        let rows = self.rows;
        let mut tokens = vec![0i32; rows * len];
        let mut mask = vec![0i32; rows * len];
        for (r, row) in ids.iter().enumerate() {
            for (p, &t) in row.iter().enumerate() {
                tokens[r * len + p] = t as i32;
                mask[r * len + p] = 1;
            }
        }
        let pos: Vec<i32> = (0..rows).flat_map(|_| 0..len as i32).collect();
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, &tokens);
        inputs.set_i32(Slot::Pos, &pos);
        inputs.set_i32(Slot::Named("token_mask".to_string()), &mask);
        inputs.set_i32(Slot::Named("token_type".to_string()), &vec![0; rows * len]);
        let mut out = StepOutputs::default();
        self.exec.step(entry, &inputs, &mut out)?;
        let hidden = out.f32(0).unwrap_or_default();
        let d = self.handle.config().hidden_size;
        let mut vectors = Vec::with_capacity(ids.len());
        for (r, row) in ids.iter().enumerate() {
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
        self.exe
    }
}
