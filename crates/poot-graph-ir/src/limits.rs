//! What one trace may consume. The builder charges every request before it allocates or
//! appends, so a refused trace builds nothing past the limit.

use std::fmt;

/// A resource a trace consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// New tokens the step carries (admitted before the tracer body runs).
    Tokens,
    /// Values (inputs and intermediates).
    Values,
    /// Equations.
    Equations,
    /// Bytes of scalar literals.
    LiteralBytes,
    /// Heap bytes the graph owns: op parameters, names and labels.
    OwnedBytes,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Tokens => "tokens",
            Resource::Values => "values",
            Resource::Equations => "equations",
            Resource::LiteralBytes => "scalar-literal bytes",
            Resource::OwnedBytes => "owned bytes",
        })
    }
}

/// Finite limits for one trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceLimits {
    pub max_tokens: u64,
    pub max_values: u64,
    pub max_equations: u64,
    pub max_literal_bytes: u64,
    pub max_owned_bytes: u64,
}

impl TraceLimits {
    /// Room for a step of `max_tokens` new tokens of a large model: a 128-layer decoder traces
    /// to well under a million equations.
    pub const fn standard(max_tokens: u64) -> TraceLimits {
        TraceLimits {
            max_tokens,
            max_values: 1 << 20,
            max_equations: 1 << 20,
            max_literal_bytes: 1 << 22,
            max_owned_bytes: 1 << 28,
        }
    }

    pub fn limit(&self, r: Resource) -> u64 {
        match r {
            Resource::Tokens => self.max_tokens,
            Resource::Values => self.max_values,
            Resource::Equations => self.max_equations,
            Resource::LiteralBytes => self.max_literal_bytes,
            Resource::OwnedBytes => self.max_owned_bytes,
        }
    }
}

/// What a trace has consumed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub tokens: u64,
    pub values: u64,
    pub equations: u64,
    pub literal_bytes: u64,
    pub owned_bytes: u64,
}

impl Usage {
    pub fn get(&self, r: Resource) -> u64 {
        match r {
            Resource::Tokens => self.tokens,
            Resource::Values => self.values,
            Resource::Equations => self.equations,
            Resource::LiteralBytes => self.literal_bytes,
            Resource::OwnedBytes => self.owned_bytes,
        }
    }

    pub(crate) fn get_mut(&mut self, r: Resource) -> &mut u64 {
        match r {
            Resource::Tokens => &mut self.tokens,
            Resource::Values => &mut self.values,
            Resource::Equations => &mut self.equations,
            Resource::LiteralBytes => &mut self.literal_bytes,
            Resource::OwnedBytes => &mut self.owned_bytes,
        }
    }
}
