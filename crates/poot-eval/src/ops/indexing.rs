//! Indexing ops: gather, take-along, dynamic slice and update, scatter. Every runtime index is
//! checked: an index outside its axis is a [`Fault`], never a wrap or a clamp.

use poot_graph_ir::DType;

use crate::error::Fault;
use crate::ops::elem::{Elem, Indices, around, dispatch_dense, scalar_index, typed};
use crate::ops::strided::{Window, strides};
use crate::packed;
use crate::tensor::{HostTensor, TensorData};

/// NumPy's `take`: `out = data.dims[..axis] ++ idx.dims ++ data.dims[axis+1..]`. A packed
/// rank-2 table gathered along axis 0 decodes only the gathered rows, to f32.
pub(crate) fn gather(
    data: &HostTensor<'_>,
    idx: &HostTensor<'_>,
    axis: usize,
) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(
        data: &HostTensor<'_>,
        rows: &[usize],
        axis: usize,
    ) -> Result<TensorData<'static>, Fault> {
        let src = typed::<T>(data, 0)?;
        let (outer, dim, inner) = around(data.dims(), axis);
        let mut out = Vec::with_capacity(outer * rows.len() * inner);
        for o in 0..outer {
            for &r in rows {
                let at = (o * dim + r) * inner;
                let row = src.get(at..at + inner).ok_or(Fault::WindowLayout {
                    base: at,
                    len: src.len(),
                })?;
                out.extend_from_slice(row);
            }
        }
        Ok(T::wrap(out))
    }
    let dim = data.dims().get(axis).copied().unwrap_or(0);
    let rows = Indices::of(idx, 1)?.checked(1, dim)?;
    match data.dtype() {
        DType::Packed(format) => {
            // Along the first axis only; each index takes a slab of whole rows (one row of a
            // rank-2 table, one expert's matrix of a rank-3 stack).
            let dims = data.dims();
            if axis != 0 || dims.len() < 2 {
                return Err(Fault::Unsupported {
                    input: 0,
                    dtype: data.dtype(),
                });
            }
            let k = dims[dims.len() - 1];
            let slab_rows: usize = dims[1..dims.len() - 1].iter().product();
            let bytes = data.as_packed().map_err(|_| Fault::Unsupported {
                input: 0,
                dtype: data.dtype(),
            })?;
            let row_bytes = packed::row_bytes(format, k)?;
            let slab = slab_rows * k;
            let mut out = vec![0f32; rows.len() * slab];
            if slab > 0 {
                for (&r, dst) in rows.iter().zip(out.chunks_exact_mut(slab)) {
                    for (i, row) in dst.chunks_exact_mut(k).enumerate() {
                        let at = (r * slab_rows + i) * row_bytes;
                        let src = bytes.get(at..at + row_bytes).ok_or(Fault::WindowLayout {
                            base: at,
                            len: bytes.len(),
                        })?;
                        packed::decode(format, src, row)?;
                    }
                }
            }
            Ok(f32::wrap(out))
        }
        dtype @ DType::Components(_) => Err(Fault::Unsupported { input: 0, dtype }),
        dtype => dispatch_dense!(dtype, 0, go(data, &rows, axis)),
    }
}

/// NumPy's `take_along_axis`: `out[.., j, ..] = data[.., idx[.., j, ..], ..]` along `axis`.
pub(crate) fn take_along(
    data: &HostTensor<'_>,
    idx: &HostTensor<'_>,
    axis: usize,
) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(
        data: &HostTensor<'_>,
        idx: &HostTensor<'_>,
        axis: usize,
    ) -> Result<TensorData<'static>, Fault> {
        let src = typed::<T>(data, 0)?;
        let (outer, dim, inner) = around(data.dims(), axis);
        let (_, n_idx, _) = around(idx.dims(), axis);
        let rows = Indices::of(idx, 1)?.checked(1, dim)?;
        let mut out = Vec::with_capacity(rows.len());
        for o in 0..outer {
            for j in 0..n_idx {
                for i in 0..inner {
                    let at = (o * n_idx + j) * inner + i;
                    let r = rows.get(at).copied().ok_or(Fault::WindowLayout {
                        base: at,
                        len: rows.len(),
                    })?;
                    let v = src.get((o * dim + r) * inner + i).copied();
                    out.push(v.ok_or(Fault::WindowLayout {
                        base: (o * dim + r) * inner + i,
                        len: src.len(),
                    })?);
                }
            }
        }
        Ok(T::wrap(out))
    }
    dispatch_dense!(data.dtype(), 0, go(data, idx, axis))
}

/// The window origin of a dynamic slice or update: one checked start per axis, read from the
/// scalar operands `starts` (operand numbers from `first_input`).
fn window_base(
    dims: &[usize],
    sizes: &[usize],
    starts: &[&HostTensor<'_>],
    first_input: usize,
) -> Result<usize, Fault> {
    let s = strides(dims);
    let mut base = 0usize;
    for (axis, ((&dim, &size), start)) in dims.iter().zip(sizes).zip(starts).enumerate() {
        let input = first_input + axis;
        let at = scalar_index(start, input)?;
        let ok = usize::try_from(at)
            .ok()
            .filter(|&a| a.checked_add(size).is_some_and(|end| end <= dim));
        let a = ok.ok_or(Fault::WindowOutOfRange {
            input,
            axis,
            start: at,
            size,
            dim,
        })?;
        base += a * s[axis];
    }
    Ok(base)
}

/// A window of `sizes` at runtime starts (one scalar per axis). Starts are not clamped.
pub(crate) fn dynamic_slice(
    x: &HostTensor<'_>,
    starts: &[&HostTensor<'_>],
    sizes: &[usize],
) -> Result<TensorData<'static>, Fault> {
    let base = window_base(x.dims(), sizes, starts, 1)?;
    let s = strides(x.dims());
    crate::ops::movement::window(
        x,
        &Window {
            base,
            strides: &s,
            dims: sizes,
        },
    )
}

/// `operand` with `update` written at runtime starts (one scalar per axis). Starts are not
/// clamped. `operand` is consumed: an owned buffer is updated in place.
pub(crate) fn dynamic_update_slice(
    operand: HostTensor<'_>,
    update: &HostTensor<'_>,
    starts: &[&HostTensor<'_>],
) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(
        operand: HostTensor<'_>,
        update: &HostTensor<'_>,
        base: usize,
    ) -> Result<TensorData<'static>, Fault> {
        let s = strides(operand.dims());
        let dtype = operand.dtype();
        let mut dst = T::take(operand.into_data()).ok_or(Fault::Unsupported { input: 0, dtype })?;
        let src = typed::<T>(update, 1)?;
        Window {
            base,
            strides: &s,
            dims: update.dims(),
        }
        .write(&mut dst, src)?;
        Ok(T::wrap(dst))
    }
    let base = window_base(operand.dims(), update.dims(), starts, 2)?;
    dispatch_dense!(operand.dtype(), 0, go(operand, update, base))
}

/// `operand` with slice `i` of `updates` along `axis` written at position `indices[i]`. With
/// repeated indices the last write wins. `operand` is consumed: an owned buffer is updated in
/// place.
pub(crate) fn scatter_update(
    operand: HostTensor<'_>,
    idx: &HostTensor<'_>,
    updates: &HostTensor<'_>,
    axis: usize,
) -> Result<TensorData<'static>, Fault> {
    fn go<T: Elem>(
        operand: HostTensor<'_>,
        rows: &[usize],
        updates: &HostTensor<'_>,
        axis: usize,
    ) -> Result<TensorData<'static>, Fault> {
        let (outer, dim, inner) = around(operand.dims(), axis);
        let dtype = operand.dtype();
        let mut dst = T::take(operand.into_data()).ok_or(Fault::Unsupported { input: 0, dtype })?;
        let src = typed::<T>(updates, 2)?;
        let n = rows.len();
        for o in 0..outer {
            for (i, &r) in rows.iter().enumerate() {
                let from = (o * n + i) * inner;
                let to = (o * dim + r) * inner;
                let part = src.get(from..from + inner).ok_or(Fault::WindowLayout {
                    base: from,
                    len: src.len(),
                })?;
                let len = dst.len();
                dst.get_mut(to..to + inner)
                    .ok_or(Fault::WindowLayout { base: to, len })?
                    .copy_from_slice(part);
            }
        }
        Ok(T::wrap(dst))
    }
    let dim = operand.dims().get(axis).copied().unwrap_or(0);
    let rows = Indices::of(idx, 1)?.checked(1, dim)?;
    dispatch_dense!(operand.dtype(), 0, go(operand, &rows, updates, axis))
}
