//! Packed (ggml block) weights: the bridge to `poot-formats`' CPU decodes. The evaluator never
//! decodes a block itself.

use poot_formats::{BlockFormat, DenseType, FormatError, decode_blocks, decode_dense};
use poot_graph_ir::GgmlType;

use crate::error::Fault;

/// Why packed bytes could not be decoded to f32.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// `poot-formats` has no decode for this ggml type. Bind the weight in a format it decodes
    /// (or as a dense type).
    #[error("ggml type {format:?} has no decode")]
    NoDecode { format: GgmlType },
    /// The decode refused the bytes (not whole blocks, say).
    #[error("decoding {format:?}: {source}")]
    Format {
        format: GgmlType,
        source: FormatError,
    },
}

/// Bytes one row of `k` elements occupies.
pub(crate) fn row_bytes(format: GgmlType, k: usize) -> Result<usize, Fault> {
    format
        .bytes_for(k as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(Fault::PackedRow { format, k })
}

/// Decodes the whole blocks of `format` in `bytes` into `out` (exactly the elements they hold).
/// Block formats decode through `poot-formats` bit-identically to ggml; the unpacked float ggml
/// types (F32, F16, BF16, F64) decode as dense words.
pub(crate) fn decode(format: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    let wrap = |source| DecodeError::Format { format, source };
    if let Some(block) = BlockFormat::from_ggml(format) {
        return decode_blocks(block, bytes, out).map_err(wrap);
    }
    let dense = match format {
        GgmlType::F32 => DenseType::F32,
        GgmlType::F16 => DenseType::F16,
        GgmlType::BF16 => DenseType::BF16,
        GgmlType::F64 => DenseType::F64,
        _ => return Err(DecodeError::NoDecode { format }),
    };
    decode_dense(dense, bytes, out).map_err(wrap)
}
