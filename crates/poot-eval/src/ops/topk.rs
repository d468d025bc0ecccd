//! `ArgTopK`: the indices of the `k` largest along the last axis, in descending order.
//!
//! Ties go to the lower index. A NaN counts as larger than every number (like arg-max), NaNs
//! among themselves by index; `-0` and `+0` tie.

use std::cmp::Ordering;

use crate::error::Fault;
use crate::ops::reduce::check_len;
use crate::tensor::{HostTensor, TensorData};

/// Descending order of keys: `Less` when `a` ranks before `b`.
trait TopKey: Copy {
    fn rank(a: Self, b: Self) -> Ordering;
}

impl TopKey for f32 {
    fn rank(a: f32, b: f32) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
        }
    }
}

impl TopKey for i32 {
    fn rank(a: i32, b: i32) -> Ordering {
        b.cmp(&a)
    }
}

impl TopKey for u32 {
    fn rank(a: u32, b: u32) -> Ordering {
        b.cmp(&a)
    }
}

fn top_k<T: TopKey>(x: &[T], n: usize, k: usize) -> Result<Vec<i32>, Fault> {
    if n == 0 || k == 0 {
        return Ok(Vec::new());
    }
    if i32::try_from(n).is_err() {
        return Err(Fault::IndexOverflow { dim: n });
    }
    let k = k.min(n);
    let mut out = Vec::with_capacity(x.len() / n * k);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for row in x.chunks_exact(n) {
        let cmp = |&i: &usize, &j: &usize| T::rank(row[i], row[j]).then(i.cmp(&j));
        order.clear();
        order.extend(0..n);
        order.select_nth_unstable_by(k - 1, cmp);
        order.truncate(k);
        order.sort_unstable_by(cmp);
        out.extend(order.iter().map(|&i| i as i32));
    }
    Ok(out)
}

pub(crate) fn arg_top_k(x: &HostTensor<'_>, k: usize) -> Result<TensorData<'static>, Fault> {
    check_len(x)?;
    let n = x.dims().last().copied().unwrap_or(1);
    let out = match x.data() {
        TensorData::F32(v) => top_k(v, n, k)?,
        TensorData::I32(v) => top_k(v, n, k)?,
        TensorData::U32(v) => top_k(v, n, k)?,
        _ => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: x.dtype(),
            });
        }
    };
    Ok(TensorData::I32(out.into()))
}
