use super::{Builder, BuilderError, Traced, to_f32};
use crate::op::BinaryOp;

/// `x @ w^T (+ bias)`: `x` `[.., K]` f32, `w` `[N, K]` as the checkpoint stores it (f32, f16,
/// bf16 or packed, read as stored by the contraction), `bias` `[N]`.
pub fn linear(
    b: &Builder,
    x: Traced,
    w: Traced,
    bias: Option<Traced>,
) -> Result<Traced, BuilderError> {
    let dims = b.dims(x)?;
    let y = if dims.len() >= 2 {
        b.matmul(x, w, true)?
    } else {
        let x2 = b.reshape(x, [1, dims.first().copied().unwrap_or(1)])?;
        let y = b.matmul(x2, w, true)?;
        let n = b.dims(y)?[1];
        b.reshape(y, [n])?
    };
    match bias {
        None => Ok(y),
        Some(bias) => super::binary_bcast(b, BinaryOp::Add, y, to_f32(b, bias)?),
    }
}

/// The row-parallel half of a tensor-parallel projection: `x` `[.., K / ranks]` holds this
/// rank's slice of the features and `w` `[N, K / ranks]` the matching columns of the weight;
/// the partial products are summed over the group's `ranks` graphs, then `bias` is added once.
/// With `ranks == 1` this is exactly [`linear`] (no collective is recorded).
pub fn row_parallel_linear(
    b: &Builder,
    x: Traced,
    w: Traced,
    bias: Option<Traced>,
    ranks: usize,
) -> Result<Traced, BuilderError> {
    if ranks == 1 {
        return linear(b, x, w, bias);
    }
    let partial = linear(b, x, w, None)?;
    let y = b.all_reduce_sum(partial, ranks)?;
    match bias {
        None => Ok(y),
        Some(bias) => super::binary_bcast(b, BinaryOp::Add, y, to_f32(b, bias)?),
    }
}

/// Rows of an embedding table for integer `ids` (any shape), as f32; a stored f16/bf16 or
/// packed table converts only the gathered rows.
pub fn embed(b: &Builder, table: Traced, ids: Traced) -> Result<Traced, BuilderError> {
    let rows = b.gather(table, ids, 0)?;
    to_f32(b, rows)
}
