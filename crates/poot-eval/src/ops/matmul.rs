//! Contractions: `MatMul` and `IndexedMatMul`, to f32.
//!
//! The weight (`rhs`) is read as stored: f32 in place, f16/bf16 widened and packed blocks decoded
//! a row (or row segment) at a time into a per-task scratch buffer, once per call, and then
//! contracted with every lhs row that needs it. Work is split over rayon tasks by blocks of
//! output columns; each output element is computed by one task in a fixed order, so results do
//! not depend on the thread count.
//!
//! Accumulation: with `transpose_rhs` (a weight `[N, K]` as checkpoints store it) and for
//! `IndexedMatMul`, each output is a dot product in the order of [`crate::ops::dot`]. Without it
//! (`rhs [K, N]`), each output accumulates left to right over `k`. Either accumulates in f64
//! when asked, rounding once.

use rayon::prelude::*;

use crate::error::Fault;
use crate::ops::dot::{dot_f32, dot_f64, dot4_f32, dot4_f64};
use crate::ops::elem::{Indices, product, typed};
use crate::ops::weights::Weights;
use crate::tensor::{HostTensor, TensorData};

/// A one-row and a four-row dot kernel of one accumulation mode.
type DotFn = fn(&[f32], &[f32]) -> f32;
type Dot4Fn = fn([&[f32]; 4], &[f32]) -> [f32; 4];

/// Multiply-adds one task should do, so tiny contractions are not split into tinier tasks.
const TASK_MACS: usize = 1 << 16;

/// Output columns per task for `rows` lhs rows of length `k`.
fn block_cols(rows: usize, k: usize, n: usize) -> usize {
    (TASK_MACS / rows.saturating_mul(k).max(1)).clamp(1, n.max(1))
}

/// Contracts weight rows `[first, first + count)` (each `k` long) with the lhs rows
/// `lhs_rows` (each `k` long in `lhs`): `result[r * lhs_rows.len() + i] = dot(lhs row i, weight
/// row first + r)`. Each weight row is read once.
fn dot_block(
    w: &Weights<'_>,
    first: usize,
    count: usize,
    k: usize,
    lhs: &[f32],
    lhs_rows: &[usize],
    f64_acc: bool,
) -> Result<Vec<f32>, Fault> {
    let a: Vec<&[f32]> = lhs_rows
        .iter()
        .map(|&m| {
            lhs.get(m * k..(m + 1) * k).ok_or(Fault::WindowLayout {
                base: m * k,
                len: lhs.len(),
            })
        })
        .collect::<Result<_, _>>()?;
    let mut scratch = Vec::new();
    let mut res = Vec::with_capacity(count * a.len());
    for r in first..first + count {
        let row = w.read(r * k, k, &mut scratch)?;
        // Four lhs rows share each load of the weight row; results equal the one-row kernels.
        let (one, four): (DotFn, Dot4Fn) = if f64_acc {
            (dot_f64, dot4_f64)
        } else {
            (dot_f32, dot4_f32)
        };
        let quads = a.chunks_exact(4);
        let rest = quads.remainder();
        for q in quads {
            res.extend(four([q[0], q[1], q[2], q[3]], row));
        }
        res.extend(rest.iter().map(|a| one(a, row)));
    }
    Ok(res)
}

/// Output columns `[n0, n0 + cols)` of a `[K, N]` weight that starts at element `offset`.
#[derive(Clone, Copy)]
struct Columns {
    offset: usize,
    n: usize,
    n0: usize,
    cols: usize,
}

/// `acc[m][j] += lhs[m][k] * rhs[k][n0 + j]` over every `k`, for the columns `c` of `m_rows`
/// lhs rows (each `k` long) starting at `lhs` row 0.
fn axpy_block(
    w: &Weights<'_>,
    c: Columns,
    k: usize,
    lhs: &[f32],
    m_rows: usize,
    f64_acc: bool,
) -> Result<Vec<f32>, Fault> {
    let Columns {
        offset,
        n,
        n0,
        cols,
    } = c;
    let lhs = lhs.get(..m_rows * k).ok_or(Fault::WindowLayout {
        base: m_rows * k,
        len: lhs.len(),
    })?;
    let mut scratch = Vec::new();
    if f64_acc {
        let mut acc = vec![0f64; m_rows * cols];
        for kk in 0..k {
            let row = w.read(offset + kk * n + n0, cols, &mut scratch)?;
            for (m, out) in acc.chunks_exact_mut(cols.max(1)).enumerate().take(m_rows) {
                let a = f64::from(lhs[m * k + kk]);
                for (o, &b) in out.iter_mut().zip(row) {
                    *o += a * f64::from(b);
                }
            }
        }
        Ok(acc.into_iter().map(|v| v as f32).collect())
    } else {
        let mut acc = vec![0f32; m_rows * cols];
        for kk in 0..k {
            let row = w.read(offset + kk * n + n0, cols, &mut scratch)?;
            for (m, out) in acc.chunks_exact_mut(cols.max(1)).enumerate().take(m_rows) {
                let a = lhs[m * k + kk];
                for (o, &b) in out.iter_mut().zip(row) {
                    *o += a * b;
                }
            }
        }
        Ok(acc)
    }
}

/// Batched `lhs [.., M, K] x rhs` where `rhs` is `[.., K, N]`, or `[.., N, K]` when
/// `transpose_rhs`; a rank-2 `rhs` is shared by every batch.
pub(crate) fn matmul(
    lhs: &HostTensor<'_>,
    rhs: &HostTensor<'_>,
    transpose_rhs: bool,
    f64_acc: bool,
) -> Result<TensorData<'static>, Fault> {
    let a = typed::<f32>(lhs, 0)?;
    let w = Weights::of(rhs, 1)?;
    let (ld, rd) = (lhs.dims(), rhs.dims());
    let (Some(&[rows, k]), Some(&[r0, r1])) = (ld.last_chunk::<2>(), rd.last_chunk::<2>()) else {
        return Err(Fault::Unsupported {
            input: 0,
            dtype: lhs.dtype(),
        });
    };
    let n = if transpose_rhs { r0 } else { r1 };
    // A shared rank-2 rhs sees every lhs row of every batch as one [batch * M, K] matrix, so each
    // of its rows is read once per call.
    let shared = rd.len() == 2;
    let (batch, m) = match product(&ld[..ld.len() - 2]) {
        b if shared => (1, b * rows),
        b => (b, rows),
    };
    let mut out = vec![0f32; batch * m * n];
    if out.is_empty() {
        return Ok(TensorData::F32(out.into()));
    }
    let cols = block_cols(m, k, n);
    let tasks: Vec<(usize, usize)> = (0..batch)
        .flat_map(|b| (0..n).step_by(cols).map(move |n0| (b, n0)))
        .collect();
    let lhs_rows: Vec<usize> = (0..m).collect();
    let results: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(b, n0)| {
            let width = cols.min(n - n0);
            let rb = if shared { 0 } else { b };
            let lhs_b = &a[b * m * k..(b + 1) * m * k];
            if transpose_rhs {
                dot_block(&w, rb * n + n0, width, k, lhs_b, &lhs_rows, f64_acc)
            } else {
                axpy_block(
                    &w,
                    Columns {
                        offset: rb * k * n,
                        n,
                        n0,
                        cols: width,
                    },
                    k,
                    lhs_b,
                    m,
                    f64_acc,
                )
            }
        })
        .collect::<Result<_, Fault>>()?;
    for (&(b, n0), res) in tasks.iter().zip(&results) {
        let width = cols.min(n - n0);
        let base = b * m * n + n0;
        for j in 0..width {
            for i in 0..m {
                // dot_block lays out [width][m]; axpy_block [m][width].
                let v = if transpose_rhs {
                    res[j * m + i]
                } else {
                    res[i * width + j]
                };
                out[base + i * n + j] = v;
            }
        }
    }
    Ok(TensorData::F32(out.into()))
}

/// `out[t] = lhs[t] x rhs[idx[t]]^T` for `lhs [T, K]`, `rhs [E, N, K]`, `idx [T]`. Rows are grouped
/// by expert so each selected expert's weight rows are read once; unselected experts are never
/// read.
pub(crate) fn indexed_matmul(
    lhs: &HostTensor<'_>,
    rhs: &HostTensor<'_>,
    idx: &HostTensor<'_>,
    f64_acc: bool,
) -> Result<TensorData<'static>, Fault> {
    let a = typed::<f32>(lhs, 0)?;
    let w = Weights::of(rhs, 1)?;
    let (Some(&[t, k]), Some(&[e, n, _])) =
        (lhs.dims().last_chunk::<2>(), rhs.dims().last_chunk::<3>())
    else {
        return Err(Fault::Unsupported {
            input: 0,
            dtype: lhs.dtype(),
        });
    };
    let experts = Indices::of(idx, 2)?.checked(2, e)?;
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); e];
    for (row, &x) in experts.iter().enumerate() {
        rows[x].push(row);
    }
    let mut out = vec![0f32; t * n];
    if out.is_empty() {
        return Ok(TensorData::F32(out.into()));
    }
    let tasks: Vec<(usize, usize, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .flat_map(|(x, r)| {
            let cols = block_cols(r.len(), k, n);
            (0..n)
                .step_by(cols)
                .map(move |n0| (x, n0, cols.min(n - n0)))
        })
        .collect();
    let results: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(x, n0, width)| dot_block(&w, x * n + n0, width, k, a, &rows[x], f64_acc))
        .collect::<Result<_, Fault>>()?;
    for (&(x, n0, width), res) in tasks.iter().zip(&results) {
        let r = &rows[x];
        for j in 0..width {
            for (i, &row) in r.iter().enumerate() {
                out[row * n + n0 + j] = res[j * r.len() + i];
            }
        }
    }
    Ok(TensorData::F32(out.into()))
}
