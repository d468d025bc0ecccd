use super::{Builder, BuilderError, Traced};
use crate::op::{BinaryOp, InferError, Scalar};
use crate::types::{DType, Shape};

/// NumPy's broadcast of two shapes, or `None` when they are incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// `op(x, y)` after broadcasting both to their common shape (emitting a broadcast only for an
/// operand whose shape differs).
pub fn binary_bcast(
    b: &Builder,
    op: BinaryOp,
    x: Traced,
    y: Traced,
) -> Result<Traced, BuilderError> {
    let (xd, yd) = (b.dims(x)?, b.dims(y)?);
    let shape = broadcast_shape(&xd, &yd).ok_or_else(|| BuilderError::Infer {
        at: op.name().to_string(),
        source: InferError::Broadcast {
            from: Shape::new(xd.clone()),
            to: Shape::new(yd.clone()),
        },
    })?;
    let x = if xd == shape {
        x
    } else {
        b.broadcast(x, shape.clone())?
    };
    let y = if yd == shape {
        y
    } else {
        b.broadcast(y, shape)?
    };
    b.binary(op, x, y)
}

/// A literal broadcast to the shape of `like`.
pub fn scalar_like(b: &Builder, value: f32, like: Traced) -> Result<Traced, BuilderError> {
    let dims = b.dims(like)?;
    let s = b.literal(Scalar::F32(value))?;
    if dims.is_empty() {
        Ok(s)
    } else {
        b.broadcast(s, dims)
    }
}

/// `x` as f32, casting stored f16/bf16 (and integer) values explicitly.
pub fn to_f32(b: &Builder, x: Traced) -> Result<Traced, BuilderError> {
    if b.aval(x)?.dtype == DType::F32 {
        Ok(x)
    } else {
        b.cast(x, DType::F32)
    }
}
