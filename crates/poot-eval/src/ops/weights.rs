//! Reading a contraction's weight as stored: f32 in place, f16/bf16 converted and packed blocks
//! or component formats decoded into a scratch row, a row at a time.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use poot_formats::MatrixShape;
use poot_graph_ir::{ComponentFormat, GgmlType};

use crate::error::Fault;
use crate::packed;
use crate::tensor::{HostTensor, TensorData};

/// A weight operand viewed as a flat run of elements.
pub(crate) enum Weights<'d> {
    F32(&'d [f32]),
    F16(&'d [f16]),
    BF16(&'d [bf16]),
    Packed {
        format: GgmlType,
        bytes: &'d [u8],
    },
    /// A component-format `[N, K]` weight, read a whole row at a time.
    Components {
        format: ComponentFormat,
        shape: MatrixShape,
        parts: &'d packed::Parts<'d>,
    },
}

impl<'d> Weights<'d> {
    pub(crate) fn of(t: &'d HostTensor<'_>, input: usize) -> Result<Weights<'d>, Fault> {
        Ok(match t.data() {
            TensorData::F32(v) => Weights::F32(v),
            TensorData::F16(v) => Weights::F16(v),
            TensorData::BF16(v) => Weights::BF16(v),
            TensorData::Packed(bytes) => match t.dtype() {
                poot_graph_ir::DType::Packed(format) => Weights::Packed { format, bytes },
                dtype => return Err(Fault::Unsupported { input, dtype }),
            },
            TensorData::Components(parts) => match (t.dtype(), t.dims()) {
                (poot_graph_ir::DType::Components(format), &[n, k]) => Weights::Components {
                    format,
                    shape: MatrixShape::new(n, k),
                    parts,
                },
                (dtype, _) => return Err(Fault::Unsupported { input, dtype }),
            },
            TensorData::I32(_) | TensorData::U32(_) | TensorData::U8(_) | TensorData::Bool(_) => {
                return Err(Fault::Unsupported {
                    input,
                    dtype: t.dtype(),
                });
            }
        })
    }

    /// Elements `[start, start + len)` as f32: borrowed for f32, converted or decoded into
    /// `scratch` otherwise. A packed run must start and end on block boundaries; a
    /// component-format run must be one whole row.
    pub(crate) fn read<'s>(
        &'s self,
        start: usize,
        len: usize,
        scratch: &'s mut Vec<f32>,
    ) -> Result<&'s [f32], Fault> {
        let range = |n: usize| {
            (start <= n && len <= n - start)
                .then_some(start..start + len)
                .ok_or(Fault::WindowLayout {
                    base: start,
                    len: n,
                })
        };
        match self {
            Weights::F32(v) => Ok(&v[range(v.len())?]),
            Weights::F16(v) => {
                scratch.resize(len, 0.0);
                v[range(v.len())?].convert_to_f32_slice(scratch);
                Ok(scratch)
            }
            Weights::BF16(v) => {
                scratch.resize(len, 0.0);
                v[range(v.len())?].convert_to_f32_slice(scratch);
                Ok(scratch)
            }
            Weights::Packed { format, bytes } => {
                let block = format.block_elems();
                if block == 0 || !start.is_multiple_of(block) || !len.is_multiple_of(block) {
                    return Err(Fault::PackedRow {
                        format: *format,
                        k: len,
                    });
                }
                let from = start / block * format.block_bytes();
                let n = len / block * format.block_bytes();
                let src = bytes.get(from..from + n).ok_or(Fault::WindowLayout {
                    base: from,
                    len: bytes.len(),
                })?;
                scratch.resize(len, 0.0);
                packed::decode(*format, src, scratch)?;
                Ok(scratch)
            }
            Weights::Components {
                format,
                shape,
                parts,
            } => {
                let k = shape.k_cols;
                if k == 0 || !start.is_multiple_of(k) || len != k {
                    return Err(Fault::WindowLayout {
                        base: start,
                        len: shape.n_rows.saturating_mul(k),
                    });
                }
                scratch.resize(len, 0.0);
                packed::decode_components_row(*format, *shape, parts, start / k, scratch)?;
                Ok(scratch)
            }
        }
    }
}
