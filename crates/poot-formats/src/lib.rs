//! Stored weight formats: what a checkpoint's bytes mean.
//!
//! A tensor is stored either densely ([`DenseType`]) or as blocks of a packed format. GGUF names
//! its formats by ggml type id ([`GgmlType`]); every id ggml has assigned is listed so a reader can
//! name what it refuses. [`StoredType`] is the one type a weight store records per tensor.

mod dense;
mod ggml;

pub use dense::DenseType;
pub use ggml::GgmlType;

/// How one stored tensor's bytes are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoredType {
    /// One element per fixed-width word.
    Dense(DenseType),
    /// Rows of ggml blocks (GGUF quantized tensors).
    Ggml(GgmlType),
}

impl StoredType {
    /// Bytes that `n_elems` elements occupy, or `None` when `n_elems` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, n_elems: u64) -> Option<u64> {
        match self {
            StoredType::Dense(d) => n_elems.checked_mul(d.size_bytes() as u64),
            StoredType::Ggml(g) => g.bytes_for(n_elems),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StoredType::Dense(d) => d.name(),
            StoredType::Ggml(g) => g.name(),
        }
    }
}
