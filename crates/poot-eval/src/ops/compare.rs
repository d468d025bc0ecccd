//! Elementwise comparison (to bool) and selection.
//!
//! f32 comparisons are IEEE: every comparison with NaN is false except `ne`, and `-0 == +0`.
//! Bools order `false < true`.

use poot_graph_ir::CompareOp;

use crate::error::Fault;
use crate::ops::elem::{Elem, dispatch_dense, typed};
use crate::tensor::{HostTensor, TensorData};

fn cmp<T: PartialOrd + Copy>(op: CompareOp, a: &[T], b: &[T]) -> Vec<bool> {
    let f: fn(&T, &T) -> bool = match op {
        CompareOp::Eq => T::eq,
        CompareOp::Ne => T::ne,
        CompareOp::Lt => T::lt,
        CompareOp::Le => T::le,
        CompareOp::Gt => T::gt,
        CompareOp::Ge => T::ge,
    };
    a.iter().zip(b).map(|(x, y)| f(x, y)).collect()
}

pub(crate) fn compare(
    op: CompareOp,
    x: &HostTensor<'_>,
    y: &HostTensor<'_>,
) -> Result<TensorData<'static>, Fault> {
    let out = match (x.data(), y.data()) {
        (TensorData::F32(a), TensorData::F32(b)) => cmp(op, a, b),
        (TensorData::I32(a), TensorData::I32(b)) => cmp(op, a, b),
        (TensorData::U32(a), TensorData::U32(b)) => cmp(op, a, b),
        (TensorData::Bool(a), TensorData::Bool(b)) => cmp(op, a, b),
        _ => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: x.dtype(),
            });
        }
    };
    Ok(TensorData::Bool(out.into()))
}

/// `cond ? on_true : on_false`, elementwise.
pub(crate) fn select(
    cond: &HostTensor<'_>,
    on_true: &HostTensor<'_>,
    on_false: &HostTensor<'_>,
) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(
        c: &[bool],
        t: &HostTensor<'_>,
        f: &HostTensor<'_>,
    ) -> Result<TensorData<'static>, Fault> {
        let (t, f) = (typed::<T>(t, 1)?, typed::<T>(f, 2)?);
        Ok(T::wrap(
            c.iter()
                .zip(t)
                .zip(f)
                .map(|((&c, &a), &b)| if c { a } else { b })
                .collect(),
        ))
    }
    let c = typed::<bool>(cond, 0)?;
    dispatch_dense!(on_true.dtype(), 1, go(c, on_true, on_false))
}
