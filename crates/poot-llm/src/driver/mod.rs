//! The driver: one model on one executor. It loads the weights once as one executable, prepares
//! a finite set of entries (rows x tokens x head) up front, and serves sequences through
//! `open`, `step`, `commit` and `release`: prefill in chunks, decode replayed per token, several
//! sequences batched in the rows of one step. Every step ends in the sampling suffix, so the host
//! reads back token ids and a non-finite flag, never the logits. `generate` is that surface
//! driven for one sequence.

mod compat;
mod kv;
mod lora;
mod serving;
mod speculation;

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use poot_executor::{
    ChainCounter, ChainFeed, ChainId, EntryId, ExecError, ExecutableId, Executor, PagedFeed,
};
use poot_graph_ir::{Slot, TraceLimits};
use poot_models::pipeline::broadcast_outputs;
use poot_models::{
    KvLayout, KvType, LogitsMode, LoraError, LoraShape, LoraTables, Shard, Stage, StepShape,
    StepSpec, TraceError,
};

use crate::guide::{Constraint, GuideError};
use crate::handle::{HandleError, ModelHandle};
pub use crate::placement::Placement;
use crate::sampling::{
    HISTORY_SLOT, Head, MAX_LOGIT_BIAS, MAX_TOP_LOGPROBS, SEED_SLOT, Sampler, ShortReadback,
    append_head,
};
use crate::weights::HandleWeights;

pub use compat::{Feature, Incompatible, check_compatible};
pub use kv::PrefixCacheStats;
pub use serving::{SeqEvent, SeqId, SeqToken, StepPicks};
pub use speculation::{PromptLookup, SpecStats, Speculation};

use self::kv::KvPool;
use self::lora::{Adapters, WithTables};
use self::serving::Sequences;

/// Fixed for the driver's life.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriverOptions {
    /// KV positions: prompt plus new tokens.
    pub capacity: usize,
    /// New tokens per prefill step.
    pub prefill_chunk: usize,
    /// The limits every traced step runs under.
    pub trace: TraceLimits,
    /// The most sequences open at once: the rows of a decode step.
    pub rows: usize,
    /// The bound on what preparing may retain.
    pub prepared: PreparedSetLimits,
    /// Decode steps chained on the device per host wait when every row is decoding
    /// (`RowWork::Chain`); 1 waits after every token.
    pub chain: usize,
    /// Tokens one serving step may feed: every decoding row's token first, then prompt chunks
    /// up to this budget (at least one prompt token per step, so prompts always advance).
    pub max_batched_tokens: usize,
    /// Speculative decoding: drafted tokens per verification step and where drafts come from
    /// (a draft model is attached with [`Driver::attach_draft`]).
    pub speculation: Speculation,
    /// LoRA adapter tables every step reads (vLLM's `--max-loras`, `--max-lora-rank`); `None`
    /// serves the base model only.
    pub lora: Option<LoraShape>,
    /// What the KV cache stores (f32 unless set; f16 takes half the memory).
    pub kv_type: KvType,
}

impl DriverOptions {
    /// One row, standard trace limits for `prefill_chunk` tokens, default prepared-set limits.
    pub fn new(capacity: usize, prefill_chunk: usize) -> DriverOptions {
        DriverOptions {
            capacity,
            prefill_chunk,
            trace: TraceLimits::standard(prefill_chunk.max(1) as u64),
            rows: 1,
            prepared: PreparedSetLimits::default(),
            chain: DEFAULT_CHAIN,
            max_batched_tokens: prefill_chunk.max(1) + 1,
            speculation: Speculation::OFF,
            lora: None,
            kv_type: KvType::default(),
        }
    }

    /// Stores the KV cache as `kv_type`.
    pub fn with_kv_type(mut self, kv_type: KvType) -> DriverOptions {
        self.kv_type = kv_type;
        self
    }

    /// Compiles every step with adapter tables of this capacity (see [`Driver::load_lora`]).
    pub fn with_lora(mut self, lora: Option<LoraShape>) -> DriverOptions {
        self.lora = lora;
        self
    }

    /// Speculates as `speculation` says. A verification step carries `tokens + 1` positions
    /// for each row of a bucket, so the trace limits grow to hold the largest.
    pub fn with_speculation(mut self, speculation: Speculation) -> DriverOptions {
        self.speculation = speculation;
        self.trace = TraceLimits::standard(self.step_tokens() as u64);
        self
    }

    /// The most new tokens one step carries: a prompt chunk, a decode over every row, or a
    /// verification step over every row.
    fn step_tokens(&self) -> usize {
        let verify = if self.speculation.is_on() {
            self.rows.saturating_mul(self.speculation.tokens + 1)
        } else {
            0
        };
        self.prefill_chunk.max(self.rows).max(verify).max(1)
    }

    /// Feeds at most `tokens` tokens per serving step (decoding rows plus prompt chunks).
    pub fn with_max_batched_tokens(mut self, tokens: usize) -> DriverOptions {
        self.max_batched_tokens = tokens.max(1);
        self
    }

    /// The row counts of the decode steps serving prepares: powers of two below `rows`, and
    /// `rows`. A step runs the smallest that holds its decoding rows.
    pub fn row_buckets(&self) -> Vec<usize> {
        buckets(self.rows)
    }

    /// The token counts of the prompt chunks serving prepares: powers of two from 2 below
    /// `prefill_chunk`, and `prefill_chunk`. A prompt is fed in the largest that fits what is
    /// left of it, so a 31-token prompt takes 5 steps (16, 8, 4, 2, 1), not 31.
    pub fn chunk_buckets(&self) -> Vec<usize> {
        if self.prefill_chunk <= 1 {
            return Vec::new();
        }
        buckets(self.prefill_chunk)
            .into_iter()
            .filter(|&t| t >= 2)
            .collect()
    }

    /// Chains up to `steps` decode steps per host wait (1 disables chaining).
    pub fn with_chain(mut self, steps: usize) -> DriverOptions {
        self.chain = steps.max(1);
        self
    }

    /// Serves up to `rows` sequences at once (needs the paged layout when above 1).
    pub fn with_rows(mut self, rows: usize) -> DriverOptions {
        self.rows = rows;
        self.trace = TraceLimits::standard(self.step_tokens() as u64);
        self.max_batched_tokens = self.prefill_chunk.max(1) + rows;
        self
    }
}

/// Powers of two below `n`, then `n`.
fn buckets(n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |&b| b.checked_mul(2))
        .take_while(|&b| b < n)
        .collect();
    out.push(n.max(1));
    out
}

/// Decode steps chained per host wait by default: long enough to hide the host's turn, short
/// enough that streamed text still arrives smoothly.
pub const DEFAULT_CHAIN: usize = 8;

/// What a driver may prepare: a serving step compiles nothing, so this bounds the whole set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreparedSetLimits {
    pub max_entries: usize,
    /// Scratch and state bytes the executor holds for the prepared entries.
    pub max_retained_bytes: u64,
}

impl Default for PreparedSetLimits {
    fn default() -> PreparedSetLimits {
        PreparedSetLimits {
            max_entries: 256,
            max_retained_bytes: 64 << 30,
        }
    }
}

/// How the KV cache is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One cache region per row; serves one sequence at a time.
    Contiguous,
    /// A pool of `blocks` blocks of `block_tokens` positions shared by every row and step shape,
    /// addressed through per-step block tables.
    Paged { block_tokens: usize, blocks: usize },
}

/// A driver whose entries are not prepared: it cannot generate yet.
pub struct Unprepared;
/// A prepared driver.
pub struct Serving;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_new: usize,
    pub sampler: Sampler,
    /// Strings that end generation when the output contains them (not included).
    pub stops: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many most likely alternatives (at most
    /// [`MAX_TOP_LOGPROBS`]); `None` reports none.
    pub top_logprobs: Option<usize>,
    /// Speculate when the driver does (false decodes this request one token a step).
    pub speculate: bool,
    /// The loaded LoRA adapter to decode with, by name; `None` for the base model.
    pub lora: Option<String>,
    /// Guided decoding: the output must match this (see [`crate::guide`]). A guided request
    /// runs the adjusting head, one token a step (no chaining, no speculation).
    pub guide: Option<Constraint>,
}

impl GenerateRequest {
    /// A request for `max_new` tokens after `prompt` with `sampler` and nothing else.
    pub fn new(prompt: Vec<u32>, max_new: usize, sampler: Sampler) -> GenerateRequest {
        GenerateRequest {
            prompt,
            max_new,
            sampler,
            stops: Vec::new(),
            ignore_eos: false,
            top_logprobs: None,
            speculate: true,
            lora: None,
            guide: None,
        }
    }

    /// The narrowest head that serves the request: its sampler's, or the adjusting head (the
    /// one that reads the allowed-token mask) when it is guided.
    pub fn head(&self) -> Head {
        let logprobs = self.top_logprobs.is_some();
        match self.sampler.head(logprobs) {
            Head::Greedy | Head::Sample if self.guide.is_some() => Head::Adjusted,
            head => head,
        }
    }
}

/// A generated token's log-probability under the adjusted distribution (after penalties, bias
/// and temperature), with the most likely alternatives, most likely first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One generated token as the sink sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeneratedToken<'a> {
    pub id: u32,
    /// The text this token completes (may be empty while a character is split across tokens).
    pub text: &'a str,
    /// When the request asked for log-probabilities.
    pub logprob: Option<&'a TokenLogprob>,
}

/// Returned by the token sink: go on, or stop after this token.
pub type GenerationControl = ControlFlow<()>;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    Eos,
    /// A stop string.
    Stop,
    /// `max_new` tokens.
    Length,
    /// The sink asked to stop.
    Cancelled,
    /// The device produced a non-finite logit: the sequence's next token is not trustworthy.
    NonFinite,
    /// Guided decoding failed mid-generation (the event's `guide_error` says why).
    Guide,
}

/// The result of one generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// One per token when the request asked for log-probabilities, else empty.
    pub logprobs: Vec<TokenLogprob>,
    pub text: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Why the driver refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The executor failed (see its error for whether it can go on).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The family could not trace a step shape.
    #[error(transparent)]
    Trace(Box<TraceError>),
    /// Appending the sampling suffix failed.
    #[error("sampling suffix: {0}")]
    Suffix(#[from] poot_graph_ir::BuilderError),
    /// The prompt plus the new tokens do not fit the cache.
    #[error(
        "the prompt ({prompt} tokens) plus {max_new} new tokens exceed the capacity of {capacity}"
    )]
    Capacity {
        prompt: usize,
        max_new: usize,
        capacity: usize,
    },
    /// An empty prompt.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The capacity exceeds what the model was built for, or the chunk exceeds the capacity.
    #[error(
        "capacity {capacity} with chunks of {chunk} is not valid for a model of {max_positions} positions"
    )]
    Options {
        capacity: usize,
        chunk: usize,
        max_positions: usize,
    },
    /// A step shape no prepared entry serves.
    #[error("no prepared entry for {rows} rows of {tokens} tokens with head {head:?}")]
    Unprepared {
        rows: usize,
        tokens: usize,
        head: Head,
    },
    /// Every row, or the KV blocks a request needs, are taken: retry after a release.
    #[error(
        "no room: {open} of {rows} rows open, the request needs {blocks_needed} KV blocks and {blocks_free} are free"
    )]
    NoRoom {
        open: usize,
        rows: usize,
        blocks_needed: usize,
        blocks_free: usize,
    },
    /// Two features that do not compose.
    #[error(transparent)]
    Incompatible(#[from] Incompatible),
    /// Preparing would exceed the prepared-set limits.
    #[error("preparing {what}: {needed} exceeds the prepared-set limit of {limit}")]
    PreparedSet {
        what: &'static str,
        needed: u64,
        limit: u64,
    },
    /// A paged layout that cannot serve the capacity.
    #[error(
        "a paged layout of {blocks} blocks of {block_tokens} positions cannot serve a capacity of {capacity} (block_tokens must divide it, and one row's blocks plus a scratch block must fit)"
    )]
    PagedLayout {
        block_tokens: usize,
        blocks: usize,
        capacity: usize,
    },
    /// The call needs a driver with no open sequences.
    #[error("{open} sequences are open")]
    Busy { open: usize },
    /// The step's outputs were shorter than the sampling suffix writes.
    #[error(transparent)]
    Readback(#[from] ShortReadback),
    /// A sequence id this driver does not hold.
    #[error("no open sequence {0:?}")]
    UnknownSequence(SeqId),
    /// The device produced a non-finite logit: the step's token is not trustworthy.
    #[error("non-finite logits at generated token {step}")]
    NonFinite { step: usize },
    /// The request's sampling parameters are invalid for this model.
    #[error("invalid sampling parameters: {0}")]
    Sampling(String),
    /// A placement the executor cannot run: it drives another number of devices than the
    /// placement spans.
    #[error("{placement} needs an executor over {needed} devices; this one drives {ranks}")]
    Placement {
        placement: Placement,
        needed: usize,
        ranks: usize,
    },
    /// A token id outside the vocabulary came back from the device.
    #[error("the device returned token {token}, outside the vocabulary of {vocab}")]
    BadToken { token: i32, vocab: usize },
    /// A draft model whose vocabulary is not the target's: its drafts would be other tokens.
    #[error(
        "the draft model's vocabulary differs from the target's ({draft_vocab} against {target_vocab} tokens{})",
        first_difference.map(|id| format!(", first at token {id}")).unwrap_or_default()
    )]
    DraftVocabulary {
        target_vocab: usize,
        draft_vocab: usize,
        first_difference: Option<u32>,
    },
    /// A draft model's driver must hold every target row at the target's capacity.
    #[error(
        "the draft model's driver has {draft_rows} rows of capacity {draft_capacity}; the target needs {target_rows} rows of capacity {target_capacity}"
    )]
    DraftShape {
        target_rows: usize,
        draft_rows: usize,
        target_capacity: usize,
        draft_capacity: usize,
    },
    /// An adapter that cannot be loaded: it does not fit the model or the compiled capacity.
    #[error(transparent)]
    Lora(#[from] LoraError),
    /// A LoRA call on a driver built without adapter tables: build it with
    /// [`DriverOptions::with_lora`].
    #[error("this driver was built without LoRA tables (--max-loras)")]
    LoraOff,
    /// A request or an unload names an adapter that is not loaded.
    #[error("no LoRA adapter named `{name}` is loaded")]
    UnknownLora { name: String },
    /// Loading under a name already loaded: unload it first.
    #[error("a LoRA adapter named `{name}` is already loaded")]
    LoraExists { name: String },
    /// Every adapter index is taken: unload one, or restart with a larger `--max-loras`.
    #[error("all {max_loras} LoRA adapter slots are taken")]
    LoraFull { max_loras: usize },
    /// Unloading an adapter open sequences still decode with: retry after they finish.
    #[error("LoRA adapter `{name}` is used by {open} open sequences")]
    LoraInUse { name: String, open: usize },
    /// Tokenizer or handle failure while streaming text.
    #[error(transparent)]
    Handle(Box<HandleError>),
    #[error(transparent)]
    Tokenizer(#[from] poot_text::TokenizerError),
    /// The request's constraint is invalid, or guided decoding failed.
    #[error(transparent)]
    Guide(#[from] GuideError),
}

impl From<HandleError> for DriverError {
    fn from(e: HandleError) -> DriverError {
        DriverError::Handle(Box::new(e))
    }
}

impl From<TraceError> for DriverError {
    fn from(e: TraceError) -> DriverError {
        DriverError::Trace(Box::new(e))
    }
}

/// A refused `serve`: the unprepared driver, handed back, and why.
pub type Refused = Box<(Driver<Unprepared>, DriverError)>;

/// What one prepared entry serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    pub rows: usize,
    pub tokens: usize,
    pub head: Head,
}

/// One model on one executor (one device, or a group of devices driven as one).
pub struct Driver<S = Serving> {
    handle: Arc<ModelHandle>,
    exec: Box<dyn Executor>,
    placement: Placement,
    exe: ExecutableId,
    options: DriverOptions,
    entries: HashMap<EntryKey, EntryId>,
    chains: HashMap<EntryKey, ChainId>,
    /// Entries serving may use that are not prepared yet, in the order idle time warms them.
    pending: Vec<EntryKey>,
    /// Entries whose preparation failed: steps use a larger prepared one instead.
    failed: HashSet<EntryKey>,
    preparation: Preparation,
    /// Device runs by (rows, tokens) of the entry that ran them.
    runs: std::collections::BTreeMap<(usize, usize), u64>,
    layout: Layout,
    seqs: Sequences,
    /// The draft model, once attached.
    draft: Option<Box<Driver<Serving>>>,
    spec_stats: SpecStats,
    /// The adapter tables and names, when built with LoRA.
    adapters: Option<Adapters>,
    guide_stats: GuideStats,
    _state: PhantomData<S>,
}

/// What computing guided decoding's masks has cost so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GuideStats {
    /// Masks computed (one per guided row per pick).
    pub masks: u64,
    /// Host seconds the steps waited for them (rows in parallel, so at most the sum).
    pub wait_seconds: f64,
    /// Seconds summed over every mask (the cost per token, without the parallelism).
    pub mask_seconds: f64,
}

/// Where preparing the entries has spent its time so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Preparation {
    /// Entries prepared.
    pub entries: usize,
    /// Tracing the family and appending the sampling head.
    pub trace_seconds: f64,
    /// Planning, compiling (or reading the kernel cache) and recording, in the executor.
    pub compile_seconds: f64,
}

impl<S> Driver<S> {
    pub fn handle(&self) -> &Arc<ModelHandle> {
        &self.handle
    }

    pub fn executor(&self) -> &dyn Executor {
        self.exec.as_ref()
    }

    pub fn options(&self) -> DriverOptions {
        self.options
    }

    /// Where the model runs.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The KV layout serving uses (contiguous until `serve` picks one).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The most sequences open at once.
    pub fn rows(&self) -> usize {
        self.options.rows
    }

    /// What guided decoding's masks have cost so far.
    pub fn guide_stats(&self) -> GuideStats {
        self.guide_stats
    }

    /// Where preparing the entries has spent its time so far.
    pub fn preparation(&self) -> Preparation {
        self.preparation
    }

    /// How many device runs each step shape made, by (rows, tokens): which row buckets and
    /// prompt chunks the scheduler chose (a chain of decode steps counts once).
    pub fn runs(&self) -> &std::collections::BTreeMap<(usize, usize), u64> {
        &self.runs
    }

    /// Entries serving may still prepare (idle time warms them; a step needing one prepares it).
    pub fn pending_entries(&self) -> usize {
        self.pending.len()
    }

    fn prepare(&mut self, layout: Layout, key: EntryKey) -> Result<(), DriverError> {
        let mut shape = StepShape::new(key.rows, key.tokens, self.options.capacity)
            .with_lora(self.options.lora)
            .with_kv_type(self.options.kv_type);
        if key.head.verifies() {
            shape = shape.with_logits(LogitsMode::All);
        }
        if let Layout::Paged {
            block_tokens,
            blocks,
        } = layout
        {
            shape = shape.with_kv(KvLayout::Paged {
                block_tokens,
                blocks,
            });
        }
        let spec = StepSpec::step(shape);
        let traced_at = Instant::now();
        // One graph per device: a tensor-parallel rank's, a pipeline stage's (whose picks are
        // then the last stage's on every stage), or the whole model's.
        let devices = self.placement.devices();
        let mut graphs = Vec::with_capacity(devices);
        for rank in 0..devices {
            let placed = self.placement.rank_shape(rank, shape)?;
            let graph = self
                .handle
                .model()
                .trace(&StepSpec::step(placed), self.options.trace)?;
            let graph = append_head(graph, key.head, self.options.trace, self.options.rows)?;
            graphs.push(broadcast_outputs(graph, placed.stage, self.options.trace)?);
        }
        let compiled_at = Instant::now();
        self.preparation.trace_seconds += (compiled_at - traced_at).as_secs_f64();
        let entry =
            self.exec
                .add_entry_ranked(self.exe, &graphs, &entry_label(&spec, Some(key.head)))?;
        self.entries.insert(key, entry);
        self.preparation.entries += 1;
        // The log-probability record is a second output a chain does not keep: those steps
        // wait on the host.
        if key.tokens == 1 && self.options.chain > 1 && key.head != Head::Logprobs {
            let mut counters = vec![ChainCounter {
                slot: Slot::Pos,
                stride: 1,
                offset: 0,
            }];
            let mut token_slots = vec![Slot::Token];
            if key.head.adjusts() {
                token_slots.push(Slot::Named(HISTORY_SLOT.to_string()));
            }
            if key.head.samples() {
                counters.push(ChainCounter {
                    slot: Slot::Named(SEED_SLOT.to_string()),
                    stride: 2,
                    offset: 1,
                });
            }
            let paged = match layout {
                Layout::Paged { block_tokens, .. } => Some(PagedFeed {
                    block_tokens: block_tokens as u32,
                }),
                Layout::Contiguous => None,
            };
            let feed = ChainFeed {
                pick_output: 0,
                token_slots,
                counters,
                paged,
                max_steps: self.options.chain,
            };
            let chain = self.exec.add_chain(entry, &feed)?;
            self.chains.insert(key, chain);
        }
        self.preparation.compile_seconds += compiled_at.elapsed().as_secs_f64();
        Ok(())
    }
}

/// How an entry is named in a refusal: its program, step shape and head.
pub fn entry_label(spec: &StepSpec, head: Option<Head>) -> String {
    let s = &spec.shape;
    let head = match head {
        Some(h) => format!(", {} head", format!("{h:?}").to_lowercase()),
        None => String::new(),
    };
    let layout = match s.kv {
        KvLayout::Contiguous => String::new(),
        KvLayout::Paged { block_tokens, .. } => format!(", paged by {block_tokens}"),
    };
    format!(
        "{} (rows {}, tokens {}, capacity {}{layout}{head})",
        spec.program, s.rows, s.tokens, s.capacity
    )
}

impl Driver<Unprepared> {
    /// Binds `handle` to `exec`, loading its weights once.
    pub fn new(
        handle: Arc<ModelHandle>,
        exec: Box<dyn Executor>,
        options: DriverOptions,
    ) -> Result<Driver<Unprepared>, DriverError> {
        Driver::placed(handle, exec, Placement::Single, options)
    }

    /// Binds `handle` to `coordinator`, an executor over the devices `placement` spans (a
    /// [`poot_executor::Coordinator`], such as the ptx backend's `open_group`), loading each
    /// device's weights once and tracing every entry once per device. A tensor-parallel group
    /// uploads each rank's slices of the split weights; a group with more ranks than the model
    /// has key/value heads is a typed [`DriverError::Trace`]. A layer pipeline uploads each
    /// stage's layers (the split [`crate::capacity::Planner`] fits), and each stage's entries end
    /// in a broadcast of the last stage's picks, so the group's outputs (rank 0's) and every
    /// stage's chained decode read them; more stages than layers is a typed
    /// [`DriverError::Trace`]. Size the devices first with [`crate::capacity::Planner`].
    pub fn placed(
        handle: Arc<ModelHandle>,
        mut coordinator: Box<dyn Executor>,
        placement: Placement,
        options: DriverOptions,
    ) -> Result<Driver<Unprepared>, DriverError> {
        let exec = &mut coordinator;
        let max_positions = handle.config().max_positions;
        if options.capacity == 0
            || options.capacity > max_positions
            || options.prefill_chunk == 0
            || options.prefill_chunk > options.capacity
            || options.rows == 0
            || options.speculation.tokens >= options.capacity
        {
            return Err(DriverError::Options {
                capacity: options.capacity,
                chunk: options.prefill_chunk,
                max_positions,
            });
        }
        let ranks = exec.ranks();
        if placement.devices() != ranks {
            return Err(DriverError::Placement {
                placement,
                needed: placement.devices(),
                ranks,
            });
        }
        let tables = match options.lora {
            None => None,
            Some(shape) => {
                check_compatible(Feature::Lora, Feature::Devices(placement.devices()))?;
                Some(
                    LoraTables::new(handle.model().weights(), handle.config().n_layers, shape)?
                        .with_qk_rows(handle.model().lora_qk_rows()),
                )
            }
        };
        // Each device's weights: the whole model, its rank's shard or its stage's layers.
        let sources = (0..placement.devices())
            .map(
                |rank| -> Result<Box<dyn poot_executor::ConstSource>, DriverError> {
                    let handle = Arc::clone(&handle);
                    Ok(Box::new(match placement {
                        Placement::Single => HandleWeights::new(handle),
                        Placement::TensorParallel { ranks } => {
                            HandleWeights::for_rank(handle, Shard::new(rank, ranks)?)?
                        }
                        Placement::Pipeline { stages } => {
                            HandleWeights::for_stage(handle, Stage::new(rank, stages)?)?
                        }
                    }))
                },
            )
            .collect::<Result<Vec<_>, _>>()?;
        // One device (checked above): the weights and the zero adapter tables.
        let sources = match &tables {
            Some(tables) => vec![Box::new(WithTables {
                base: HandleWeights::new(Arc::clone(&handle)),
                tables: tables.clone(),
            }) as Box<dyn poot_executor::ConstSource>],
            None => sources,
        };
        let exe = exec.load_weights_ranked(sources)?;
        let adapters = tables.map(|tables| Adapters {
            names: vec![None; tables.shape().max_loras],
            tables,
        });
        Ok(Driver {
            handle,
            exec: coordinator,
            placement,
            exe,
            options,
            entries: HashMap::new(),
            chains: HashMap::new(),
            pending: Vec::new(),
            failed: HashSet::new(),
            preparation: Preparation::default(),
            runs: Default::default(),
            layout: Layout::Contiguous,
            seqs: Sequences::default(),
            draft: None,
            spec_stats: SpecStats::default(),
            adapters,
            guide_stats: GuideStats::default(),
            _state: PhantomData,
        })
    }

    /// Prepares every entry serving needs under `layout` (prefill chunks and single-token steps
    /// over all rows, with the greedy, sampling, adjusted and log-probability heads), so a
    /// serving step compiles nothing. A refusal hands the unprepared driver back.
    pub fn serve(mut self, layout: Layout) -> Result<Driver<Serving>, Refused> {
        if let Err(e) = self.prepare_all(layout) {
            return Err(Box::new((self, e)));
        }
        let Driver {
            handle,
            exec,
            placement,
            exe,
            options,
            entries,
            chains,
            pending,
            failed,
            preparation,
            runs,
            adapters,
            ..
        } = self;
        let pool = KvPool::new(layout, options.capacity);
        Ok(Driver {
            handle,
            exec,
            placement,
            exe,
            options,
            entries,
            chains,
            pending,
            failed,
            preparation,
            runs,
            layout,
            seqs: Sequences::new(options.rows, pool),
            draft: None,
            spec_stats: SpecStats::default(),
            adapters,
            guide_stats: GuideStats::default(),
            _state: PhantomData,
        })
    }

    fn prepare_all(&mut self, layout: Layout) -> Result<(), DriverError> {
        let rows = self.options.rows;
        check_compatible(Feature::Layout(layout), Feature::Rows(rows))?;
        if let Layout::Paged {
            block_tokens,
            blocks,
        } = layout
        {
            KvPool::check(block_tokens, blocks, self.options.capacity)?;
        }
        // Prepared now: the decode step over every row with each head, the fallback any
        // step can run on. Everything else waits in `pending` for idle time or first use.
        let heads = [Head::Greedy, Head::Sample, Head::Adjusted, Head::Logprobs];
        let eager: Vec<EntryKey> = heads
            .iter()
            .map(|&head| EntryKey {
                rows,
                tokens: 1,
                head,
            })
            .collect();
        let mut pending = Vec::new();
        // Warm the common heads first: small decode buckets, then prompt chunks largest first.
        for pair in [
            [Head::Greedy, Head::Sample],
            [Head::Adjusted, Head::Logprobs],
        ] {
            for &b in self.options.row_buckets().iter().filter(|&&b| b < rows) {
                pending.extend(pair.map(|head| EntryKey {
                    rows: b,
                    tokens: 1,
                    head,
                }));
            }
            for &t in self.options.chunk_buckets().iter().rev() {
                pending.extend(pair.map(|head| EntryKey {
                    rows: 1,
                    tokens: t,
                    head,
                }));
            }
        }
        // Verification steps, when speculating: every row bucket, greedy then sampled.
        if self.options.speculation.is_on() {
            let tokens = self.options.speculation.tokens + 1;
            for head in [Head::Verify, Head::VerifySample] {
                pending.extend(self.options.row_buckets().into_iter().map(|rows| EntryKey {
                    rows,
                    tokens,
                    head,
                }));
            }
        }
        let count = (eager.len() + pending.len()) as u64;
        let limits = self.options.prepared;
        if count > limits.max_entries as u64 {
            return Err(DriverError::PreparedSet {
                what: "entries",
                needed: count,
                limit: limits.max_entries as u64,
            });
        }
        for key in eager {
            self.prepare(layout, key)?;
        }
        self.check_retained()?;
        self.pending = pending;
        Ok(())
    }
}

impl<S> Driver<S> {
    /// Refuses when the prepared entries retain more than the prepared-set limit allows.
    fn check_retained(&self) -> Result<(), DriverError> {
        let stats = self.exec.stats();
        let retained = stats.scratch_bytes.saturating_add(stats.state_bytes);
        let limit = self.options.prepared.max_retained_bytes;
        if retained > limit {
            return Err(DriverError::PreparedSet {
                what: "retained bytes",
                needed: retained,
                limit,
            });
        }
        Ok(())
    }
}

/// Refuses a request whose sampling parameters are out of range for a vocabulary of `vocab`.
fn check_request(req: &GenerateRequest, vocab: usize) -> Result<(), DriverError> {
    let s = &req.sampler;
    let bad = |why: String| Err(DriverError::Sampling(why));
    if !(s.temperature.is_finite() && s.temperature >= 0.0) {
        return bad(format!(
            "temperature {} must be finite and >= 0",
            s.temperature
        ));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return bad(format!("top_p {} must be in (0, 1]", s.top_p));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return bad(format!("min_p {} must be in [0, 1]", s.min_p));
    }
    // The device draws among at most CANDIDATES tokens: a larger top_k would be cut silently.
    if s.top_k as usize > crate::sampling::CANDIDATES {
        return bad(format!(
            "top_k {} exceeds the {} candidates the device draws from",
            s.top_k,
            crate::sampling::CANDIDATES
        ));
    }
    let p = s.penalties;
    if !(p.repetition.is_finite() && p.repetition > 0.0) {
        return bad(format!(
            "repetition penalty {} must be finite and > 0",
            p.repetition
        ));
    }
    if !(p.presence.is_finite() && p.frequency.is_finite()) {
        return bad("presence and frequency penalties must be finite".to_string());
    }
    if s.logit_bias.len() > MAX_LOGIT_BIAS {
        return bad(format!(
            "{} logit-bias entries (at most {MAX_LOGIT_BIAS})",
            s.logit_bias.len()
        ));
    }
    if let Some(&(id, b)) = s
        .logit_bias
        .iter()
        .find(|(id, b)| *id as usize >= vocab || !b.is_finite())
    {
        return bad(format!(
            "logit bias {b} for token {id} (tokens are below {vocab}, biases finite)"
        ));
    }
    if let Some(n) = req.top_logprobs
        && n > MAX_TOP_LOGPROBS
    {
        return bad(format!("top_logprobs {n} (at most {MAX_TOP_LOGPROBS})"));
    }
    Ok(())
}
