//! Ops with no inputs: literals and iotas.

use poot_graph_ir::{DType, Scalar};

use crate::error::Fault;
use crate::ops::elem::around;
use crate::tensor::TensorData;

pub(crate) fn literal(s: Scalar) -> TensorData<'static> {
    match s {
        Scalar::F32(v) => TensorData::F32(vec![v].into()),
        Scalar::I32(v) => TensorData::I32(vec![v].into()),
        Scalar::U32(v) => TensorData::U32(vec![v].into()),
        Scalar::Bool(v) => TensorData::Bool(vec![v].into()),
    }
}

/// Element indices along `axis` of a tensor of `dims`: i32/u32 wrap past their range, f32 rounds
/// to nearest.
pub(crate) fn iota(
    dims: &[usize],
    axis: usize,
    dtype: DType,
) -> Result<TensorData<'static>, Fault> {
    let (outer, n, inner) = around(dims, axis);
    let idx = (0..outer).flat_map(move |_| (0..n).flat_map(move |a| std::iter::repeat_n(a, inner)));
    Ok(match dtype {
        DType::I32 => TensorData::I32(idx.map(|a| a as i32).collect()),
        DType::U32 => TensorData::U32(idx.map(|a| a as u32).collect()),
        DType::F32 => TensorData::F32(idx.map(|a| a as f32).collect()),
        DType::F16
        | DType::BF16
        | DType::U8
        | DType::Bool
        | DType::Packed(_)
        | DType::Components(_) => {
            return Err(Fault::Unsupported { input: 0, dtype });
        }
    })
}
