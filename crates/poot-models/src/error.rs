//! Typed failures of building a model and tracing a step.

use poot_graph_ir::BuilderError;

use crate::step::{KvLayout, Program};

/// Why a step could not be traced. Nothing past the failure was built.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The builder refused a call: a limit was reached, or shapes did not agree.
    #[error(transparent)]
    Builder(#[from] BuilderError),
    /// A step with LoRA tables was asked for a tensor-parallel shard: adapters are applied to
    /// whole projections only. Serve adapters on one device, or drop `--lora`.
    #[error("LoRA adapters are not supported on a tensor-parallel shard ({ranks} ranks)")]
    LoraSharded { ranks: usize },
    /// The model does not offer this program (an encoder has no `step`, say).
    #[error("the model offers no `{program}` program")]
    NoProgram { program: Program },
    /// A step holds more positions than the rotary scaling is implemented for (LongRoPE past
    /// its original context, where its long factors would apply). Use a capacity of at most
    /// `limit` positions.
    #[error(
        "a capacity of {capacity} positions exceeds `{key}` = {limit}: the rotary scaling's long-context factors are not supported"
    )]
    RopeCapacity {
        key: &'static str,
        capacity: usize,
        limit: usize,
    },
    /// A step shape with a zero dimension, or more new tokens than the cache holds.
    #[error("step shape rows={rows} tokens={tokens} capacity={capacity} is not traceable: {why}")]
    Shape {
        rows: usize,
        tokens: usize,
        capacity: usize,
        why: &'static str,
    },
    /// The family has no tracer for this KV layout yet.
    #[error("the family cannot trace a {layout:?} KV layout")]
    Layout { layout: KvLayout },
    /// A paged KV layout whose geometry no pool can serve: a zero block size or count, a
    /// capacity that is not a whole number of blocks, or a pool too large for `i32` slot
    /// indices. Choose another block size or capacity.
    #[error(
        "paged KV layout (block_tokens={block_tokens}, blocks={blocks}) over capacity {capacity}: {why}"
    )]
    PagedGeometry {
        capacity: usize,
        block_tokens: usize,
        blocks: usize,
        why: &'static str,
    },
    /// A tensor-parallel rank outside its group.
    #[error("rank {rank} of a group of {ranks}")]
    ShardRank { rank: usize, ranks: usize },
    /// A pipeline stage outside its pipeline (also any stage of a pipeline of none).
    #[error("stage {index} of a pipeline of {stages}")]
    StageIndex { index: usize, stages: usize },
    /// A layer pipeline with more stages than the model has layers, so some stage would hold
    /// none: choose at most `layers` stages.
    #[error("a pipeline of {stages} stages over {layers} layers (each stage needs at least one)")]
    TooManyStages { stages: usize, layers: usize },
    /// A step traced for a tensor-parallel rank and a pipeline stage at once: a placement is
    /// one or the other.
    #[error(
        "rank {rank} of {ranks} and stage {stage} of {stages} at once (a step is one or the other)"
    )]
    ShardedStage {
        rank: usize,
        ranks: usize,
        stage: usize,
        stages: usize,
    },
    /// A pipeline stage of a program other than the decoder step (an encoder pass runs whole).
    #[error("the {program} program does not run as a pipeline stage")]
    StagedProgram { program: Program },
    /// A model with fewer parts (key/value heads, feed-forward blocks) than a tensor-parallel
    /// group has ranks, so some rank would hold none: choose a group of at most `count`.
    #[error("{count} {what} cannot be shared by {ranks} ranks (each needs at least one)")]
    TooFewParts {
        what: &'static str,
        count: usize,
        ranks: usize,
    },
    /// A packed weight split along its rows' elements where a rank's share is not whole blocks
    /// of its format: choose a group size that leaves each rank whole blocks.
    #[error(
        "`{name}`: {cols} columns over {ranks} ranks leaves {per_rank} per rank, not whole blocks of {block_elems}"
    )]
    PackedSplit {
        name: String,
        cols: usize,
        ranks: usize,
        per_rank: usize,
        block_elems: usize,
    },
    /// A Hugging Face component-format linear (GPTQ, AWQ, FP8, FP4) whose tensor-parallel share
    /// does not fall on what its format packs together: choose a group whose shares are whole.
    #[error(
        "`{name}` ({format}): a rank's {axis} {start}..{end} of {len} are not whole {unit} (it needs multiples of {align}); choose a rank count whose shares are whole {unit}"
    )]
    ComponentSplit {
        name: String,
        format: String,
        /// `output rows` (a column-parallel split) or `input columns` (row-parallel).
        axis: &'static str,
        start: usize,
        end: usize,
        len: usize,
        align: usize,
        /// What the format packs together along the axis (`quantization groups of 32`).
        unit: String,
    },
    /// A GPTQ act-order linear (a `g_idx` that is not `k / group`) split along its input
    /// columns: a rank's columns would read groups in any order.
    #[error(
        "`{name}` ({format}) is GPTQ act-order (desc_act): its input columns do not split over a tensor-parallel group (run it on one device, or use a checkpoint quantized without desc_act)"
    )]
    ComponentActOrder { name: String, format: String },
    /// A split weight whose shape is not whole parts of `unit` features along the split axis
    /// (its shape disagrees with the model's heads: a family bug).
    #[error("`{name}` of shape {dims:?} does not split into parts of {unit} along axis {axis}")]
    SplitShape {
        name: String,
        dims: Vec<usize>,
        axis: usize,
        unit: usize,
    },
    /// A model whose query heads are not a whole number per key/value head (a grouped-query
    /// attention the group cannot split by key/value head).
    #[error("{n_heads} query heads are not a whole number per key/value head ({n_kv_heads})")]
    HeadGroups { n_heads: usize, n_kv_heads: usize },
    /// A family whose tracer does not split its layers over a tensor-parallel group.
    #[error(
        "the `{family}` family does not run tensor-parallel (a group of {ranks} was asked for)"
    )]
    Unsharded { family: &'static str, ranks: usize },
    /// The cache capacity exceeds the positions the model was built for.
    #[error("capacity {capacity} exceeds the model's {max_positions} positions")]
    Positions {
        capacity: usize,
        max_positions: usize,
    },
    /// The step names a carried input the model does not declare.
    #[error("carried input `{name}` is not declared by the model")]
    CarriedInput { name: String },
    /// The tracer asked for a weight the weight map does not bind (a family bug).
    #[error("weight `{name}` is not in the model's weight map")]
    UnknownWeight { name: String },
    /// A traced state's type differs from what the schema declares for this step shape (a
    /// family bug).
    #[error("state `{name}` is traced as {traced:?} but the schema declares {declared:?}")]
    StateShape {
        name: String,
        declared: Vec<usize>,
        traced: Vec<usize>,
    },
    /// The traced graph carries other states than the program declares (a family bug).
    #[error("`{program}` declares states {declared:?} but the trace carries {traced:?}")]
    States {
        program: Program,
        declared: Vec<String>,
        traced: Vec<String>,
    },
}

/// Why a checkpoint could not be turned into a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The config lacks a key the family needs.
    #[error("config key `{key}` is missing")]
    MissingKey { key: String },
    /// A config key holds a value of the wrong type.
    #[error("config key `{key}` should be {expected}")]
    KeyType { key: String, expected: &'static str },
    /// A config value the family does not support.
    #[error("config key `{key}` = {value} is not supported (supported: {supported})")]
    Unsupported {
        key: String,
        value: String,
        supported: &'static str,
    },
    /// A config size beyond what the engine can address or hold (a layer count, a context, a
    /// width): refused before anything is sized by it. The checkpoint's metadata is wrong, or
    /// the model is beyond the engine.
    #[error("config key `{key}` = {value} exceeds the limit of {limit} ({why})")]
    TooLarge {
        key: String,
        value: u64,
        limit: u64,
        why: &'static str,
    },
    /// A config value outside its meaningful range (a non-positive or non-finite rotary base,
    /// a negative or NaN norm epsilon, rotary dims beyond the head).
    #[error("config key `{key}` = {value} is out of range: {expected}")]
    OutOfRange {
        key: String,
        value: String,
        expected: &'static str,
    },
    /// The config's layer count disagrees with the checkpoint's layer tensors: `tensor` is
    /// present although the config declares `declared` layers, or missing although it should
    /// be there.
    #[error("config key `{key}` declares {declared} layers, but tensor `{tensor}` is {found}")]
    LayerCount {
        key: String,
        declared: usize,
        tensor: String,
        /// `present` (the checkpoint holds more layers) or `missing` (fewer).
        found: &'static str,
    },
    /// A config's vocabulary size disagrees with a tensor's rows (the embedding, the head).
    #[error("config key `{key}` = {declared}, but tensor `{tensor}` has {rows} rows")]
    VocabSize {
        key: String,
        declared: usize,
        tensor: String,
        rows: usize,
    },
    /// A computed table (rotary angles) too large to hold: its positions are bounded by the
    /// config's context, so narrow the model to the capacity in use.
    #[error("table `{role}` of {rows} x {cols} f32 is too large to compute")]
    TableTooLarge {
        role: String,
        rows: usize,
        cols: usize,
    },
    /// The checkpoint holds more experts than the config declares: `tensor` is one past the
    /// last. The config or the checkpoint is wrong.
    #[error("config key `{key}` declares {declared} experts, but tensor `{tensor}` is present")]
    ExpertCount {
        key: String,
        declared: usize,
        tensor: String,
    },
    /// A routing config that cannot select: top-k of zero, or more experts per token than the
    /// layer has.
    #[error("config key `{key}` = {top_k} experts per token, but the layer has {experts}")]
    TopK {
        key: String,
        top_k: usize,
        experts: usize,
    },
    /// Per-expert tensors stacked into one constant are stored in different types.
    #[error("expert tensor `{name}` is stored as {stored}, but `{first}` as {first_stored}")]
    ExpertType {
        name: String,
        stored: &'static str,
        first: String,
        first_stored: &'static str,
    },
    /// A tensor the family needs is not in the checkpoint.
    #[error("tensor `{name}` ({role}) is missing from the checkpoint")]
    MissingTensor { name: String, role: String },
    /// A tensor's shape differs from what the config implies.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    /// An MXFP4 expert stack's experts take an input width that is not whole 32-element blocks,
    /// so no blocks tensor can hold it: the config's widths disagree with the checkpoint.
    #[error("tensor `{name}`: MXFP4 blocks hold 32 inputs each, but each expert takes {k_cols}")]
    Mxfp4Width { name: String, k_cols: u64 },
    /// A tensor is stored in a type the graph cannot read (as a weight or through a cast).
    #[error("tensor `{name}` is stored as {stored}, which the graph cannot read")]
    TensorType { name: String, stored: &'static str },
    /// No registered family holds this config key.
    #[error("no registered family for {source_kind} `{key}`")]
    Unregistered {
        source_kind: &'static str,
        key: String,
    },
    /// Two registry entries claim one config key.
    #[error("{source_kind} key `{key}` is registered by both `{first}` and `{second}`")]
    DuplicateKey {
        source_kind: &'static str,
        key: String,
        first: &'static str,
        second: &'static str,
    },
    /// The checkpoint could not be read.
    #[error(transparent)]
    Load(#[from] poot_load::LoadError),
}
