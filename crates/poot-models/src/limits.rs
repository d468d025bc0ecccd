//! Bounds on the sizes a config may declare. Everything a family sizes from checkpoint metadata
//! (layer lists, tables, products of widths) is read through one of these, so a corrupt or
//! hostile value is a typed error naming its key before anything is allocated or multiplied.

/// The largest value a config key may hold, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub max: usize,
    pub why: &'static str,
}

/// Layers (`num_hidden_layers`, `block_count`): far beyond any model, small enough that a
/// per-layer list is cheap.
pub const LAYERS: Limit = Limit {
    max: 1 << 12,
    why: "layers per model",
};

/// Positions (a context length, a window): a step carries positions as `i32`.
pub const POSITIONS: Limit = Limit {
    max: i32::MAX as usize,
    why: "positions are i32 in a step",
};

/// Widths (hidden size, heads, head dim, feed-forward size): 2^24 keeps every product of two of
/// them, and a tensor shape built from them, within `u64`.
pub const WIDTH: Limit = Limit {
    max: 1 << 24,
    why: "features or heads per token",
};

/// Experts per layer (`num_local_experts`, `expert_count`): beyond any model, small enough that
/// a per-expert name list is cheap.
pub const EXPERTS: Limit = Limit {
    max: 1 << 16,
    why: "experts per layer",
};
