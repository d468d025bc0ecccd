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
    /// The placement the `--tensor-parallel` and `--pipeline-stages` counts name: a group when
    /// one of them is above 1 (tensor parallelism first), else one device.
    pub fn from_counts(tensor_parallel: usize, pipeline_stages: usize) -> Placement {
        if tensor_parallel > 1 {
            Placement::TensorParallel {
                ranks: tensor_parallel,
            }
        } else if pipeline_stages > 1 {
            Placement::Pipeline {
                stages: pipeline_stages,
            }
        } else {
            Placement::Single
        }
    }

    /// Tensor-parallel ranks (1 unless tensor-parallel).
    pub fn tensor_parallel(&self) -> usize {
        match *self {
            Placement::TensorParallel { ranks } => ranks,
            Placement::Single | Placement::Pipeline { .. } => 1,
        }
    }

    /// Pipeline stages (1 unless a pipeline).
    pub fn pipeline_stages(&self) -> usize {
        match *self {
            Placement::Pipeline { stages } => stages,
            Placement::Single | Placement::TensorParallel { .. } => 1,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_counts_name_one_placement() {
        assert_eq!(Placement::from_counts(1, 1), Placement::Single);
        let tp = Placement::from_counts(4, 1);
        assert_eq!(tp, Placement::TensorParallel { ranks: 4 });
        assert_eq!(
            (tp.tensor_parallel(), tp.pipeline_stages(), tp.devices()),
            (4, 1, 4)
        );
        let pp = Placement::from_counts(1, 3);
        assert_eq!(pp, Placement::Pipeline { stages: 3 });
        assert_eq!(
            (pp.tensor_parallel(), pp.pipeline_stages(), pp.devices()),
            (1, 3, 3)
        );
    }
}
