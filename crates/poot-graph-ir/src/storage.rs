//! Where a value lives: the four kinds of graph values.

use std::fmt;

/// A per-step input, bound to a device buffer at a stable address that the host rewrites in
/// place before every step.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// Token ids of the step's new tokens.
    Token,
    /// Absolute positions of the step's new tokens.
    Pos,
    /// Paged KV: the block table, the pool block each (row, block of cache positions) reads.
    SlotMap,
    /// Paged KV: the pool slot each new token writes.
    WriteMap,
    /// Any other per-step input a model or a driver pass declares (sampler parameters, an
    /// adapter index, embedding rows).
    Named(String),
}

impl Slot {
    pub fn name(&self) -> &str {
        match self {
            Slot::Token => "token",
            Slot::Pos => "pos",
            Slot::SlotMap => "slot_map",
            Slot::WriteMap => "write_map",
            Slot::Named(n) => n,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The four kinds of values an equation can read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    /// A weight or table, bound by name when the graph is loaded; never moves.
    Const(String),
    /// A per-step input.
    Slot(Slot),
    /// The input half of a carried state pair (the KV cache); the executor feeds the buffer in
    /// and overwrites it with the paired output.
    State(String),
    /// An intermediate produced by an equation.
    Device,
}

impl Storage {
    pub fn is_input(&self) -> bool {
        !matches!(self, Storage::Device)
    }
}
