//! How a model is placed on the devices a driver runs it on.

use std::fmt;

use poot_models::{Shard, Stage, StepShape, TraceError};

/// Where a driver's model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// The whole model on one device.
    Single,
    /// A tensor-parallel group of `ranks` devices: each holds its share of every layer's
    /// attention heads and feed-forward features (and of the KV cache), the embedding and
    /// head whole, and the partial sums meet in one all-reduce after each attention and each
    /// feed-forward block. Shares are balanced, not necessarily equal; each rank needs at
    /// least one key/value head (with the query heads that read it).
    TensorParallel { ranks: usize },
    /// A layer pipeline over `stages` devices: consecutive layers on each (a balanced split, the
    /// first stages one layer more when they do not divide), with their KV cache; the first
    /// also embeds the tokens, the last holds the final norm and the head. The stages run in
    /// lockstep and hand the hidden state on with device broadcasts, and the last stage's
    /// picks are broadcast to every stage (see [`poot_models::pipeline`]). Each stage needs at
    /// least one layer.
    Pipeline { stages: usize },
}

impl Placement {
    /// Devices the placement spans.
    pub fn devices(&self) -> usize {
        match *self {
            Placement::Single => 1,
            Placement::TensorParallel { ranks } => ranks,
            Placement::Pipeline { stages } => stages,
        }
    }
}

impl Placement {
    /// The step device `rank` of the placement traces for `shape`: the whole step alone, its
    /// tensor-parallel shard, or its pipeline stage. Refused for a rank outside the placement.
    pub fn rank_shape(&self, rank: usize, shape: StepShape) -> Result<StepShape, TraceError> {
        Ok(match *self {
            Placement::Single => shape,
            Placement::TensorParallel { ranks } => shape.with_shard(Shard::new(rank, ranks)?),
            Placement::Pipeline { stages } => shape.with_stage(Stage::new(rank, stages)?),
        })
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Placement::Single => f.write_str("one device"),
            Placement::TensorParallel { ranks } => {
                write!(f, "tensor-parallel over {ranks} devices")
            }
            Placement::Pipeline { stages } => write!(f, "a layer pipeline over {stages} devices"),
        }
    }
}
