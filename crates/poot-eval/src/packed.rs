//! Packed weights (ggml blocks, and the component tensors of the Hugging Face layouts): the
//! bridge to `poot-formats`' CPU decodes. The evaluator never decodes a weight itself.

use poot_formats::{
    BlockFormat, ComponentBytes, DenseType, FormatError, MatrixShape, decode_blocks, decode_dense,
};
use poot_graph_ir::{ComponentFormat, GgmlType};

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
    /// The decode of a component-format weight refused its components (a GPTQ `g_idx` naming a
    /// group the checkpoint has no scales for, a component of the wrong size).
    #[error("decoding {format}: {source}")]
    Components {
        format: ComponentFormat,
        source: FormatError,
    },
}

/// The components of a component-format `[N, K]` weight, by role, as stored.
pub(crate) type Parts<'a> = [crate::tensor::Component<'a>];

/// Decodes row `row` of the `[n_rows, k_cols]` component-format weight `parts` into `out`
/// (`k_cols` values), through `poot-formats` (the components a format does not use are ignored).
pub(crate) fn decode_components_row(
    format: ComponentFormat,
    shape: MatrixShape,
    parts: &Parts<'_>,
    row: usize,
    out: &mut [f32],
) -> Result<(), DecodeError> {
    let bytes: Vec<ComponentBytes<'_>> = parts
        .iter()
        .map(|(name, b)| ComponentBytes::new(name, b))
        .collect();
    format
        .format()
        .decode_row(shape, &bytes, row, out)
        .map_err(|source| DecodeError::Components { format, source })
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
