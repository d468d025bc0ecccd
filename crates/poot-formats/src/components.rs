//! The component tensors a packed weight is stored as, described as data over the logical matrix
//! shape, and the byte slices a decode reads them from.

use crate::DenseType;

/// The logical shape of a weight matrix: `n_rows` output features by `k_cols` input features,
/// row-major (one row per output feature, as a Hugging Face `nn.Linear` weight and a GGUF tensor
/// of ggml shape `[K, N]` both store it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatrixShape {
    pub n_rows: usize,
    pub k_cols: usize,
}

impl MatrixShape {
    pub fn new(n_rows: usize, k_cols: usize) -> MatrixShape {
        MatrixShape { n_rows, k_cols }
    }

    /// Elements in the matrix, or `None` when that overflows.
    pub fn n_elems(self) -> Option<usize> {
        self.n_rows.checked_mul(self.k_cols)
    }
}

/// Whether a checkpoint must store a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    Required,
    /// The decode uses it when present and has a default otherwise (GPTQ's `g_idx` without
    /// act-order: column k is in group k / group size).
    Optional,
}

/// One component tensor of a packed weight: its name (the suffix after the weight's prefix, as in
/// `model.layers.0.mlp.down_proj.qweight`), stored dtype, shape and whether it must be present.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ComponentSpec {
    pub name: &'static str,
    pub dtype: DenseType,
    pub dims: Vec<usize>,
    pub presence: Presence,
}

impl ComponentSpec {
    /// Bytes the component occupies, or `None` when that overflows.
    pub fn n_bytes(&self) -> Option<usize> {
        self.dims
            .iter()
            .try_fold(self.dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
    }
}

/// A component a checkpoint holds, as its header describes it (for shape checks and inference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComponentInfo<'a> {
    pub name: &'a str,
    pub dtype: DenseType,
    pub dims: &'a [usize],
}

/// A component's stored bytes (little-endian, as in the file), handed to a decode by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComponentBytes<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

impl<'a> ComponentBytes<'a> {
    pub fn new(name: &'a str, bytes: &'a [u8]) -> ComponentBytes<'a> {
        ComponentBytes { name, bytes }
    }
}
