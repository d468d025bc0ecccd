//! How a model is placed on the devices a driver runs it on.

use std::fmt;

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
    /// A layer pipeline over `stages` devices, consecutive layers on each, the hidden state
    /// copied from one to the next. [`crate::capacity::Planner`] fits it; the driver does not
    /// run it yet and refuses it.
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
