//! What one traced step is: the program, its semantic shape, and the carried inputs it binds.

use std::fmt;

use poot_graph_ir::DType;

use crate::error::TraceError;
use crate::lora::LoraShape;

/// The programs a model may offer, named by the driver service that runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Program {
    /// Continue each row's carried state and return logits; prefill and decode are one program.
    Step,
    /// One stateless pass over whole rows, returning hidden states or scores.
    Encode,
    /// A multi-token-prediction layer over the hidden-state carry.
    Draft,
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Program::Step => "step",
            Program::Encode => "encode",
            Program::Draft => "draft",
        })
    }
}

/// How the KV cache is laid out on the device.
///
/// # The paged layout
///
/// Each layer's keys and values live in one pool state per role, under the same state names as
/// the contiguous cache (`kv.l{layer}.k`, `kv.l{layer}.v`), shaped
/// `f32 [blocks * block_tokens, kv_heads, head_dim]`: pool slot `s` holds one token's heads,
/// and block `n` is slots `n * block_tokens .. (n + 1) * block_tokens`. The pool's shape does
/// not depend on `rows`, `tokens` or `capacity`, so every entry of a driver (a one-row prefill
/// chunk, an eight-row decode) that names the same `Paged` geometry reads and writes one pool.
///
/// A paged step binds two slots besides `token` and `pos`:
///
/// - `slot_map` ([`poot_graph_ir::Slot::SlotMap`], the block table), `i32 [rows, capacity /
///   block_tokens]`: entry `[r, j]` is the pool block holding row `r`'s cache positions
///   `j * block_tokens .. (j + 1) * block_tokens`. Attention reads row `r`'s cache position `p`
///   from slot `table[r, p / block_tokens] * block_tokens + p % block_tokens`. Every entry must
///   be a block index in `0..blocks`, also past a row's length (point those at any block, the
///   scratch block for instance): an entry outside the pool is a typed gather fault.
/// - `write_map` ([`poot_graph_ir::Slot::WriteMap`]), `i32 [rows, tokens]`: entry `[r, t]` is
///   the pool slot (not block) that new token `t` of row `r` writes its keys and values to,
///   in `0..blocks * block_tokens` (outside is a typed scatter fault). A real token at
///   position `p` writes to the slot the row's table gives for `p`, so it reads back what it
///   wrote.
///
/// Positions and the causal mask are those of the contiguous layout: the mask is computed from
/// `pos`, so a gathered block holding stale keys past a row's length, or another sequence's
/// keys, is never seen. Masked keys get probability exactly zero, so the logits equal the
/// contiguous layout's bit for bit on the oracle as long as the pool holds finite values
/// (it starts zeroed, and only computed keys and values are written).
///
/// **Padding and scratch.** A row with fewer real tokens than the step's `tokens` fills the
/// rest with padding tokens (left padding keeps the last real token last, where
/// [`LogitsMode::Last`] reads). A padding token's `write_map` entry must point at a slot no
/// table exposes at a visible position: the driver reserves a scratch block for this (by
/// convention the last, `blocks - 1`) and never hands it to a sequence. Padding tokens may all
/// write the same scratch slot; which one wins is unspecified and never read. A padding
/// token's `pos` must still lie in `0..capacity` (0 will do); its logits are meaningless.
///
/// **Prefix sharing.** Two rows' tables may name the same block; a row that reuses a block
/// another sequence filled (a cached prompt prefix) reads the same keys and values and
/// simply does not write it: its step starts at the first position past the shared blocks.
/// A block is written only by tokens whose `write_map` names its slots, so a shared block
/// stays unchanged while no row writes it: share only blocks no sequence will write again
/// (full prompt blocks), and copy a block before appending to a shared one. Each layer
/// writes every row's new entries before any row reads, so a row may also read a block
/// another row of the same step is writing. Two real tokens of one step must not write the
/// same slot (which one lands is unspecified).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvLayout {
    /// One `[kv_heads, capacity, head_dim]` region per row: state `[rows, kv_heads, capacity,
    /// head_dim]`, written at each row's first position.
    Contiguous,
    /// A shared pool of `blocks` blocks of `block_tokens` positions, addressed through the block
    /// table (`slot_map`) and the write map; `capacity` must be a multiple of `block_tokens`.
    Paged { block_tokens: usize, blocks: usize },
}

/// The element type the KV cache stores. Keys and values are computed in f32; an f16 cache
/// rounds each to the nearest f16 as it is written (an op of the graph, so the oracle sees the
/// same rounding) and widens it exactly when attention reads it: half the memory and the
/// attention's traffic of an f32 cache, at a relative error of at most 2^-11 per element.
/// f32 is the default: on the H100 an f16 cache decodes many rows faster but prefills slower
/// (the prefill attention stages halves one at a time; bench/runs/2026-12-06-h100-session17).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    #[default]
    F32,
    F16,
}

impl KvType {
    /// The graph type of a cache element.
    pub fn dtype(self) -> DType {
        match self {
            KvType::F32 => DType::F32,
            KvType::F16 => DType::F16,
        }
    }

    /// Bytes one cached element takes on the device.
    pub fn bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }

    /// The name `--kv-type` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<KvType, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            _ => Err(format!("unknown KV cache type `{s}` (expected f32 or f16)")),
        }
    }
}

/// Which positions' logits a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogitsMode {
    /// Only each row's last new token (prefill and decode).
    Last,
    /// Every new token (verification windows, scoring).
    All,
}

/// Which part of a tensor-parallel group a step is traced for: rank `rank` of `ranks`. Each
/// rank holds its share of the attention heads and feed-forward features (column-parallel
/// query, key, value, gate and up projections; row-parallel output and down projections whose
/// partial sums meet in an all-reduce), and a replicated copy of everything else. Shares are
/// balanced, not necessarily equal ([`Shard::share`]): SmolLM2's three key/value heads split
/// over two ranks as one and two. A group of one ([`Shard::WHOLE`]) is the ordinary step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    pub rank: usize,
    pub ranks: usize,
}

impl Shard {
    /// The whole model on one device.
    pub const WHOLE: Shard = Shard { rank: 0, ranks: 1 };

    /// Rank `rank` of `ranks`, refused unless `rank < ranks`.
    pub fn new(rank: usize, ranks: usize) -> Result<Shard, TraceError> {
        if rank < ranks {
            Ok(Shard { rank, ranks })
        } else {
            Err(TraceError::ShardRank { rank, ranks })
        }
    }

    /// Whether this is the whole model (a group of one).
    pub fn is_whole(&self) -> bool {
        self.ranks == 1
    }

    /// This rank's share of `count` indivisible parts: a balanced partition into consecutive
    /// ranges (rank `r` holds `r * count / ranks .. (r + 1) * count / ranks`), so shares differ
    /// by at most one part when `ranks` does not divide `count`. Empty when `count < ranks`.
    pub fn share(&self, count: usize) -> std::ops::Range<usize> {
        let ranks = self.ranks.max(1);
        let at = |r: usize| (r as u128 * count as u128 / ranks as u128) as usize;
        at(self.rank)..at(self.rank + 1)
    }

    /// [`Shard::share`] of `count` parts named `what` (heads, features), refused when some rank
    /// would hold none.
    pub fn part(
        &self,
        what: &'static str,
        count: usize,
    ) -> Result<std::ops::Range<usize>, TraceError> {
        if count < self.ranks {
            return Err(TraceError::TooFewParts {
                what,
                count,
                ranks: self.ranks,
            });
        }
        Ok(self.share(count))
    }
}

impl Default for Shard {
    fn default() -> Shard {
        Shard::WHOLE
    }
}

/// Which stage of a layer pipeline a step is traced for: stage `index` of `stages`. Each stage
/// holds consecutive layers ([`Stage::layers`], the balanced split of
/// [`crate::pipeline::stage_layers`]) with their KV cache; the first also embeds the tokens,
/// the last also holds the final norm and the head. Stages hand the hidden state on through
/// broadcasts ([`crate::pipeline`]). A pipeline of one ([`Stage::WHOLE`]) is the ordinary step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    pub index: usize,
    pub stages: usize,
}

impl Stage {
    /// The whole model on one device.
    pub const WHOLE: Stage = Stage {
        index: 0,
        stages: 1,
    };

    /// Stage `index` of `stages`, refused unless `index < stages`.
    pub fn new(index: usize, stages: usize) -> Result<Stage, TraceError> {
        if index < stages {
            Ok(Stage { index, stages })
        } else {
            Err(TraceError::StageIndex { index, stages })
        }
    }

    /// Whether this is the whole model (a pipeline of one).
    pub fn is_whole(&self) -> bool {
        self.stages == 1
    }

    /// Whether this stage embeds the tokens.
    pub fn is_first(&self) -> bool {
        self.index == 0
    }

    /// Whether this stage holds the final norm and the head.
    pub fn is_last(&self) -> bool {
        self.index + 1 == self.stages
    }

    /// The layers of a model of `n_layers` this stage holds, refused when some stage would hold
    /// none.
    pub fn layers(&self, n_layers: usize) -> Result<std::ops::Range<usize>, TraceError> {
        Stage::new(self.index, self.stages)?;
        if !self.is_whole() && self.stages > n_layers {
            return Err(TraceError::TooManyStages {
                stages: self.stages,
                layers: n_layers,
            });
        }
        Ok(crate::pipeline::stage_layers(
            self.index,
            self.stages,
            n_layers,
        ))
    }
}

impl Default for Stage {
    fn default() -> Stage {
        Stage::WHOLE
    }
}

/// The semantic shape of one step: `rows` sequences of `tokens` new tokens each, over a cache of
/// `capacity` positions. Built with [`StepShape::new`] and `with_*` setters so a new field never
/// breaks a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepShape {
    pub rows: usize,
    pub tokens: usize,
    pub capacity: usize,
    pub kv: KvLayout,
    /// What the cache stores (f32 unless set: [`StepShape::with_kv_type`]).
    pub kv_type: KvType,
    pub logits: LogitsMode,
    /// Also return the final hidden state of every new token.
    pub hidden_carry: bool,
    /// The part of a tensor-parallel group this step is for ([`Shard::WHOLE`] by default).
    pub shard: Shard,
    /// The stage of a layer pipeline this step is for ([`Stage::WHOLE`] by default).
    pub stage: Stage,
    /// The adapter tables the step reads, and its per-row adapter index (none by default).
    pub lora: Option<LoraShape>,
}

impl StepShape {
    pub fn new(rows: usize, tokens: usize, capacity: usize) -> StepShape {
        StepShape {
            rows,
            tokens,
            capacity,
            kv: KvLayout::Contiguous,
            kv_type: KvType::F32,
            logits: LogitsMode::Last,
            hidden_carry: false,
            shard: Shard::WHOLE,
            stage: Stage::WHOLE,
            lora: None,
        }
    }

    pub fn with_lora(mut self, lora: Option<LoraShape>) -> StepShape {
        self.lora = lora;
        self
    }

    pub fn with_shard(mut self, shard: Shard) -> StepShape {
        self.shard = shard;
        self
    }

    pub fn with_stage(mut self, stage: Stage) -> StepShape {
        self.stage = stage;
        self
    }

    pub fn with_kv(mut self, kv: KvLayout) -> StepShape {
        self.kv = kv;
        self
    }

    pub fn with_kv_type(mut self, kv_type: KvType) -> StepShape {
        self.kv_type = kv_type;
        self
    }

    pub fn with_logits(mut self, logits: LogitsMode) -> StepShape {
        self.logits = logits;
        self
    }

    pub fn with_hidden_carry(mut self, carry: bool) -> StepShape {
        self.hidden_carry = carry;
        self
    }

    /// Checks the KV geometry of a step that reads a cache: a paged layout needs a positive
    /// block size and block count, a capacity that is a whole number of blocks, and a pool
    /// whose slot indices fit the `i32` write map.
    pub fn check_kv(&self) -> Result<(), TraceError> {
        let KvLayout::Paged {
            block_tokens,
            blocks,
        } = self.kv
        else {
            return Ok(());
        };
        let bad = |why| {
            Err(TraceError::PagedGeometry {
                capacity: self.capacity,
                block_tokens,
                blocks,
                why,
            })
        };
        if block_tokens == 0 || blocks == 0 {
            return bad("block_tokens and blocks must be positive");
        }
        if !self.capacity.is_multiple_of(block_tokens) {
            return bad("capacity must be a multiple of block_tokens");
        }
        match blocks.checked_mul(block_tokens) {
            Some(slots) if i32::try_from(slots).is_ok() => Ok(()),
            _ => bad("the pool's slots (blocks * block_tokens) must be indexable by an i32"),
        }
    }

    /// New tokens the whole step carries.
    pub fn total_tokens(&self) -> u64 {
        (self.rows as u64).saturating_mul(self.tokens as u64)
    }
}

/// One step to trace: the program, its shape, and the names of the carried request inputs it binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepSpec {
    pub program: Program,
    pub shape: StepShape,
    pub carried: Vec<String>,
}

impl StepSpec {
    pub fn new(program: Program, shape: StepShape) -> StepSpec {
        StepSpec {
            program,
            shape,
            carried: Vec::new(),
        }
    }

    /// A decoder step (prefill chunk or decode).
    pub fn step(shape: StepShape) -> StepSpec {
        StepSpec::new(Program::Step, shape)
    }

    /// An encoder pass over `rows` rows of `tokens` tokens.
    pub fn encode(rows: usize, tokens: usize) -> StepSpec {
        StepSpec::new(Program::Encode, StepShape::new(rows, tokens, tokens))
    }
}
