//! Stored weight formats: what a checkpoint's bytes mean.
//!
//! A tensor is stored either densely ([`DenseType`]) or as blocks of a packed format. GGUF names
//! its formats by ggml type id ([`GgmlType`]); every id ggml has assigned is listed so a reader can
//! name what it refuses. [`StoredType`] is the one type a weight store records per tensor.
//!
//! Every packed weight format poot reads is a [`PackedFormat`]: the GGUF block formats
//! ([`BlockFormat`], with each block's fields as data) and the Hugging Face packed layouts (GPTQ,
//! AWQ, FP8 E4M3 with scales, E2M1 FP4 with E8M0 scales), each described by the component tensors
//! it is stored as ([`PackedFormat::components`]). Each has a CPU reference decode to f32:
//! [`decode_blocks`] for GGUF blocks (bit-identical to ggml), [`PackedFormat::decode_matrix`] and
//! [`PackedFormat::decode_row`] for any format from its component bytes. [`scalar`] and
//! [`decode_dense`] widen the dense element types.

mod awq;
mod block_decode;
mod block_format;
mod components;
mod dense;
mod dense_decode;
mod error;
mod fp4;
mod fp8;
mod ggml;
mod gptq;
#[rustfmt::skip]
mod iq_tables;
mod packed;
mod packed_decode;
pub mod sample;
pub mod scalar;

pub use block_decode::{decode_block_row, decode_blocks};
pub use block_format::{BlockField, BlockFormat, FieldKind};
pub use components::{ComponentBytes, ComponentInfo, ComponentSpec, MatrixShape, Presence};
pub use dense::DenseType;
pub use dense_decode::decode_dense;
pub use error::{FormatError, MatrixDim};
pub use fp4::mxfp4_blocks_from_ocp;
pub use ggml::GgmlType;
pub use packed::{
    AWQ_NIBBLE_OF_ROW, AwqFormat, FP4_GROUP_ELEMS, FP8_BLOCK_ELEMS, Fp8Format, Fp8Scaling,
    GptqFormat, GptqZeros, GroupSize, INT4_PER_WORD, PackedFormat, ScaleType,
};

/// The codebooks of the IQ and MXFP4 block formats, the same tables [`decode_blocks`] reads, for
/// decoders outside this crate (device kernels bind them as constant buffers).
pub mod codebooks {
    use crate::iq_tables;

    /// `iq2xs_grid`: 512 entries of 8 magnitudes (IQ2_XS).
    pub const IQ2XS_GRID: &[[u8; 8]; 512] = &iq_tables::IQ2XS_GRID;
    /// `iq3xxs_grid`: 256 entries of 4 magnitudes (IQ3_XXS).
    pub const IQ3XXS_GRID: &[[u8; 4]; 256] = &iq_tables::IQ3XXS_GRID;
    /// `iq3s_grid`: 512 entries of 4 magnitudes (IQ3_S).
    pub const IQ3S_GRID: &[[u8; 4]; 512] = &iq_tables::IQ3S_GRID;
    /// `ksigns_iq2xs`: 7 stored sign bits to 8 sign bits with even parity.
    pub const KSIGNS_IQ2XS: &[u8; 128] = &iq_tables::KSIGNS_IQ2XS;
    /// `kvalues_iq4nl`: the 16 non-linear levels of IQ4_NL and IQ4_XS.
    pub const KVALUES_IQ4NL: &[i8; 16] = &iq_tables::KVALUES_IQ4NL;
    /// `kvalues_mxfp4`: E2M1 values times two, indexed by the 4-bit code.
    pub const KVALUES_MXFP4: &[i8; 16] = &iq_tables::KVALUES_MXFP4;
}

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
