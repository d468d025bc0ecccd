//! Movement ops: broadcast, transpose, slice and concat. They copy elements bit for bit and are
//! defined on every dense type.

use crate::error::Fault;
use crate::ops::elem::{Elem, around, dispatch_dense, typed};
use crate::ops::strided::{Window, strides};
use crate::tensor::{HostTensor, TensorData};

/// NumPy-style broadcast of `x` to `to` (dims aligned from the right, each input dim equal to the
/// target's or 1).
pub(crate) fn broadcast(x: &HostTensor<'_>, to: &[usize]) -> Result<TensorData<'static>, Fault> {
    let from = x.dims();
    let src = strides(from);
    let lead = to.len().saturating_sub(from.len());
    let s: Vec<usize> = (0..to.len())
        .map(|a| match a.checked_sub(lead) {
            Some(i) if from[i] != 1 => src[i],
            _ => 0,
        })
        .collect();
    window(
        x,
        &Window {
            base: 0,
            strides: &s,
            dims: to,
        },
    )
}

/// `out.dims[i] = in.dims[perm[i]]`.
pub(crate) fn transpose(x: &HostTensor<'_>, perm: &[usize]) -> Result<TensorData<'static>, Fault> {
    let src = strides(x.dims());
    let dims: Vec<usize> = perm
        .iter()
        .map(|&p| x.dims().get(p).copied().unwrap_or(0))
        .collect();
    let s: Vec<usize> = perm
        .iter()
        .map(|&p| src.get(p).copied().unwrap_or(0))
        .collect();
    window(
        x,
        &Window {
            base: 0,
            strides: &s,
            dims: &dims,
        },
    )
}

/// The static window `[starts[i], ends[i])` of every axis.
pub(crate) fn slice(
    x: &HostTensor<'_>,
    starts: &[usize],
    ends: &[usize],
) -> Result<TensorData<'static>, Fault> {
    let s = strides(x.dims());
    let base = starts.iter().zip(&s).map(|(a, b)| a * b).sum();
    let dims: Vec<usize> = starts
        .iter()
        .zip(ends)
        .map(|(a, b)| b.saturating_sub(*a))
        .collect();
    window(
        x,
        &Window {
            base,
            strides: &s,
            dims: &dims,
        },
    )
}

/// The elements a window of `x` visits.
pub(crate) fn window(x: &HostTensor<'_>, w: &Window<'_>) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(x: &HostTensor<'_>, w: &Window<'_>) -> Result<TensorData<'static>, Fault> {
        Ok(T::wrap(w.read(typed::<T>(x, 0)?)?))
    }
    dispatch_dense!(x.dtype(), 0, go(x, w))
}

/// Joins `xs` along `axis` (all of one type; dims equal except along `axis`).
pub(crate) fn concat(xs: &[&HostTensor<'_>], axis: usize) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(xs: &[&HostTensor<'_>], axis: usize) -> Result<TensorData<'static>, Fault> {
        let parts: Vec<(&[T], usize)> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let (_, dim, inner) = around(x.dims(), axis);
                Ok((typed::<T>(x, i)?, dim * inner))
            })
            .collect::<Result<_, Fault>>()?;
        let outer = xs.first().map_or(0, |x| around(x.dims(), axis).0);
        let total: usize = parts.iter().map(|(v, _)| v.len()).sum();
        let mut out = Vec::with_capacity(total);
        for o in 0..outer {
            for (v, chunk) in &parts {
                let part = v
                    .get(o * chunk..(o + 1) * chunk)
                    .ok_or(Fault::WindowLayout {
                        base: o * chunk,
                        len: v.len(),
                    })?;
                out.extend_from_slice(part);
            }
        }
        Ok(T::wrap(out))
    }
    match xs.first() {
        Some(first) => dispatch_dense!(first.dtype(), 0, go(xs, axis)),
        None => Err(Fault::WindowLayout { base: 0, len: 0 }),
    }
}
