//! Embedding poot: load a checkpoint into a [`ModelHandle`] (its family's model, its weights as
//! stored, its tokenizer and chat template). The driver that runs a handle on an executor joins
//! this crate with the executor backends.

pub mod backend;
pub mod capacity;
pub mod driver;
pub mod encoders;
pub mod guide;
pub mod handle;
pub mod placement;
pub mod sampling;
pub mod weights;

pub use backend::{
    BackendChoice, BackendError, OpenedExecutor, open_executor, open_group_executor,
    open_placed_executor,
};
pub use driver::{
    Driver, DriverError, DriverOptions, Feature, FinishReason, GenerateRequest, GeneratedToken,
    Generation, GenerationControl, GuideStats, Incompatible, Layout, Placement, PrefixCacheStats,
    Preparation, PreparedSetLimits, PromptLookup, SeqEvent, SeqId, SeqToken, Serving, SpecStats,
    Speculation, StepPicks, TokenLogprob, Unprepared, entry_label,
};
pub use encoders::{CrossEncoder, EncoderError, Ranked, ScoreActivation, SentenceEncoder};
pub use guide::{Constraint, Guide, GuideError, Guides};
pub use handle::{HandleError, LoadOptions, ModelHandle};
pub use sampling::{Head, MAX_LOGIT_BIAS, MAX_TOP_LOGPROBS, Penalties, Sampler};
pub use weights::HandleWeights;
