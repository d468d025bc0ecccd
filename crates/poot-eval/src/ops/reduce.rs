//! Reductions along one axis (kept with size 1) and arg-max.
//!
//! Sums: f32 sums accumulate in f32 in a fixed order (eight interleaved partial sums along a
//! contiguous axis, left to right otherwise), or in f64 with one rounding at the end when
//! [`crate::EvalOptions::accumulate_f64`] is set; integer sums wrap. An empty axis sums to 0.
//!
//! Max/min propagate NaN and order `-0 < +0` like the binary ops; an empty axis gives the
//! identity (`-inf`/`+inf`, the integer type's bounds).
//!
//! Arg-max returns the first index of the maximum; a NaN counts as larger than every number, so
//! the first NaN wins (consistent with max propagating it). An empty axis is a fault.

use poot_graph_ir::ReduceOp;

use crate::error::Fault;
use crate::ops::binary::{max_f32, min_f32};
use crate::ops::dot::{sum_f32, sum_f64};
use crate::ops::elem::around;
use crate::tensor::{HostTensor, TensorData};

/// Folds `x[o, :, i]` for every `(o, i)` with `f`, starting from `init`.
fn fold_axis<T: Copy, A: Copy>(
    x: &[T],
    dims: &[usize],
    axis: usize,
    init: A,
    f: impl Fn(A, T) -> A,
) -> Vec<A> {
    let (outer, n, inner) = around(dims, axis);
    let mut out = vec![init; outer * inner];
    for o in 0..outer {
        let acc = &mut out[o * inner..(o + 1) * inner];
        for a in 0..n {
            let row = &x[(o * n + a) * inner..(o * n + a + 1) * inner];
            for (s, &v) in acc.iter_mut().zip(row) {
                *s = f(*s, v);
            }
        }
    }
    out
}

fn sum_f32_axis(x: &[f32], dims: &[usize], axis: usize, f64_acc: bool) -> Vec<f32> {
    let (outer, n, inner) = around(dims, axis);
    if inner == 1 {
        return (0..outer)
            .map(|o| {
                let row = &x[o * n..(o + 1) * n];
                if f64_acc {
                    sum_f64(row) as f32
                } else {
                    sum_f32(row)
                }
            })
            .collect();
    }
    if f64_acc {
        fold_axis(x, dims, axis, 0f64, |s, v| s + f64::from(v))
            .into_iter()
            .map(|s| s as f32)
            .collect()
    } else {
        fold_axis(x, dims, axis, 0f32, |s, v| s + v)
    }
}

pub(crate) fn reduce(
    op: ReduceOp,
    x: &HostTensor<'_>,
    axis: usize,
    f64_acc: bool,
) -> Result<TensorData<'static>, Fault> {
    let dims = x.dims();
    check_len(x)?;
    Ok(match (x.data(), op) {
        (TensorData::F32(v), ReduceOp::Sum) => {
            TensorData::F32(sum_f32_axis(v, dims, axis, f64_acc).into())
        }
        (TensorData::F32(v), ReduceOp::Max) => {
            TensorData::F32(fold_axis(v, dims, axis, f32::NEG_INFINITY, max_f32).into())
        }
        (TensorData::F32(v), ReduceOp::Min) => {
            TensorData::F32(fold_axis(v, dims, axis, f32::INFINITY, min_f32).into())
        }
        (TensorData::I32(v), ReduceOp::Sum) => {
            TensorData::I32(fold_axis(v, dims, axis, 0, i32::wrapping_add).into())
        }
        (TensorData::I32(v), ReduceOp::Max) => {
            TensorData::I32(fold_axis(v, dims, axis, i32::MIN, i32::max).into())
        }
        (TensorData::I32(v), ReduceOp::Min) => {
            TensorData::I32(fold_axis(v, dims, axis, i32::MAX, i32::min).into())
        }
        (TensorData::U32(v), ReduceOp::Sum) => {
            TensorData::U32(fold_axis(v, dims, axis, 0, u32::wrapping_add).into())
        }
        (TensorData::U32(v), ReduceOp::Max) => {
            TensorData::U32(fold_axis(v, dims, axis, u32::MIN, u32::max).into())
        }
        (TensorData::U32(v), ReduceOp::Min) => {
            TensorData::U32(fold_axis(v, dims, axis, u32::MAX, u32::min).into())
        }
        _ => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: x.dtype(),
            });
        }
    })
}

/// Whether `a` beats the current best `b` for arg-max (strictly greater; NaN beats numbers).
trait ArgMaxKey: Copy {
    fn beats(self, b: Self) -> bool;
}

impl ArgMaxKey for f32 {
    fn beats(self, b: f32) -> bool {
        if b.is_nan() {
            false
        } else {
            self.is_nan() || self > b
        }
    }
}

impl ArgMaxKey for i32 {
    fn beats(self, b: i32) -> bool {
        self > b
    }
}

impl ArgMaxKey for u32 {
    fn beats(self, b: u32) -> bool {
        self > b
    }
}

fn argmax_axis<T: ArgMaxKey>(x: &[T], dims: &[usize], axis: usize) -> Result<Vec<i32>, Fault> {
    let (outer, n, inner) = around(dims, axis);
    if outer * inner == 0 {
        return Ok(Vec::new());
    }
    if n == 0 {
        return Err(Fault::EmptyArgMax { axis });
    }
    if i32::try_from(n).is_err() {
        return Err(Fault::IndexOverflow { dim: n });
    }
    let mut out = vec![0i32; outer * inner];
    for o in 0..outer {
        let best_idx = &mut out[o * inner..(o + 1) * inner];
        let mut best: Vec<T> = x[o * n * inner..(o * n + 1) * inner].to_vec();
        for a in 1..n {
            let row = &x[(o * n + a) * inner..(o * n + a + 1) * inner];
            for ((b, bi), &v) in best.iter_mut().zip(best_idx.iter_mut()).zip(row) {
                if v.beats(*b) {
                    *b = v;
                    *bi = a as i32;
                }
            }
        }
    }
    Ok(out)
}

pub(crate) fn argmax(x: &HostTensor<'_>, axis: usize) -> Result<TensorData<'static>, Fault> {
    check_len(x)?;
    let out = match x.data() {
        TensorData::F32(v) => argmax_axis(v, x.dims(), axis)?,
        TensorData::I32(v) => argmax_axis(v, x.dims(), axis)?,
        TensorData::U32(v) => argmax_axis(v, x.dims(), axis)?,
        _ => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: x.dtype(),
            });
        }
    };
    Ok(TensorData::I32(out.into()))
}

/// The loops above index by the shape; this checks that the data holds the shape's elements.
pub(crate) fn check_len(x: &HostTensor<'_>) -> Result<(), Fault> {
    let n: usize = x.dims().iter().product();
    if x.data().len() == n {
        Ok(())
    } else {
        Err(Fault::WindowLayout {
            base: n,
            len: x.data().len(),
        })
    }
}
