//! The naive reference: every primitive as plain loops over f64 values, written without looking
//! at (or sharing code with) the evaluator. Tensors are row-major `dims` + `v`; integers and bools
//! are held exactly as f64 (i32/u32 fit), and integer arithmetic is done in i64 and wrapped.
//!
//! Ops that accumulate also return an error bound per element (`bound`), derived from the
//! standard floating-point summation bound: a sum of `n` terms computed in f32 in any order
//! differs from the exact sum by at most `n * u * Σ|term|` with `u = 2^-24`. The f64 variants
//! (`bound_f64`) cover only the final rounding to f32 (`u * |sum|`) plus f64 summation error.

use std::cmp::Ordering;

use half::{bf16, f16};
use poot_graph_ir::{BinaryOp, CompareOp, DType, ReduceOp, UnaryOp};

pub const F32_UNIT: f64 = 1.0 / 16_777_216.0; // 2^-24, the unit roundoff of f32

#[derive(Clone, Debug, PartialEq)]
pub struct Ref {
    pub dims: Vec<usize>,
    pub v: Vec<f64>,
    /// Per-element error bound for f32 accumulation, when the op accumulates.
    pub bound: Option<Vec<f64>>,
    /// Per-element error bound for f64 accumulation, when the op accumulates.
    pub bound_f64: Option<Vec<f64>>,
}

impl Ref {
    pub fn new(dims: Vec<usize>, v: Vec<f64>) -> Ref {
        assert_eq!(numel(&dims), v.len(), "reference tensor {dims:?}");
        Ref {
            dims,
            v,
            bound: None,
            bound_f64: None,
        }
    }
}

pub fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// The multi-index of flat position `flat` in `dims`.
pub fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for a in (0..dims.len()).rev() {
        idx[a] = flat % dims[a];
        flat /= dims[a];
    }
    idx
}

/// The flat position of multi-index `idx` in `dims`.
pub fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    let mut flat = 0;
    for a in 0..dims.len() {
        flat = flat * dims[a] + idx[a];
    }
    flat
}

fn map(x: &Ref, f: impl Fn(f64) -> f64) -> Ref {
    Ref::new(x.dims.clone(), x.v.iter().map(|&a| f(a)).collect())
}

fn zip(a: &Ref, b: &Ref, f: impl Fn(f64, f64) -> f64) -> Ref {
    assert_eq!(a.dims, b.dims);
    Ref::new(
        a.dims.clone(),
        a.v.iter().zip(&b.v).map(|(&x, &y)| f(x, y)).collect(),
    )
}

/// Wraps an integer to the two's-complement range of `dtype`.
pub fn wrap(v: i64, dtype: DType) -> f64 {
    let m = v.rem_euclid(1 << 32);
    match dtype {
        DType::I32 => (if m >= 1 << 31 { m - (1 << 32) } else { m }) as f64,
        DType::U32 => m as f64,
        DType::U8 => v.rem_euclid(256) as f64,
        _ => panic!("wrap to {dtype}"),
    }
}

/// erf by its Taylor series near 0 and a continued fraction for erfc in the tails; accurate to
/// well under an f32 ulp.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/sqrt(pi) * sum (-1)^n a^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        for n in 1..200 {
            term *= -a * a / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-18 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a > 10.0 {
        1.0
    } else {
        // erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...)))))
        let mut f = a;
        for n in (1..300).rev() {
            f = a + (n as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    if x < 0.0 { -r } else { r }
}

pub fn unary(op: UnaryOp, dtype: DType, x: &Ref) -> Ref {
    match dtype {
        DType::F32 => map(x, |a| match op {
            UnaryOp::Neg => -a,
            UnaryOp::Abs => a.abs(),
            UnaryOp::Exp => a.exp(),
            UnaryOp::Log => a.ln(),
            UnaryOp::Sqrt => a.sqrt(),
            UnaryOp::Rsqrt => 1.0 / a.sqrt(),
            UnaryOp::Recip => 1.0 / a,
            UnaryOp::Tanh => a.tanh(),
            UnaryOp::Erf => erf(a),
            UnaryOp::Floor => a.floor(),
            UnaryOp::Ceil => a.ceil(),
            UnaryOp::Round => a.round_ties_even(),
            UnaryOp::Sin => a.sin(),
            UnaryOp::Cos => a.cos(),
            UnaryOp::Not => panic!("not on f32"),
        }),
        DType::I32 | DType::U32 => map(x, |a| {
            let i = a as i64;
            wrap(
                match op {
                    UnaryOp::Neg => -i,
                    UnaryOp::Abs => i.abs(),
                    UnaryOp::Not => !i,
                    _ => panic!("{op:?} on ints"),
                },
                dtype,
            )
        }),
        DType::Bool => map(x, |a| 1.0 - a),
        _ => panic!("unary on {dtype}"),
    }
}

fn fmax(a: f64, b: f64, want_max: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == b {
        // IEEE maximum prefers +0, minimum -0.
        return if want_max {
            if a.is_sign_positive() { a } else { b }
        } else if a.is_sign_negative() {
            a
        } else {
            b
        };
    }
    if (a > b) == want_max { a } else { b }
}

pub fn binary(op: BinaryOp, dtype: DType, a: &Ref, b: &Ref) -> Ref {
    match dtype {
        DType::F32 => zip(a, b, |x, y| match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
            BinaryOp::Max => fmax(x, y, true),
            BinaryOp::Min => fmax(x, y, false),
            BinaryOp::Pow => x.powf(y),
            _ => panic!("{op:?} on f32"),
        }),
        DType::I32 | DType::U32 => zip(a, b, |x, y| {
            let (i, j) = (x as i64, y as i64);
            let shift = j.rem_euclid(32);
            let r = match op {
                BinaryOp::Add => i + j,
                BinaryOp::Sub => i - j,
                BinaryOp::Mul => i.wrapping_mul(j),
                BinaryOp::Div => i / j,
                BinaryOp::Rem => i % j,
                BinaryOp::Max => i.max(j),
                BinaryOp::Min => i.min(j),
                BinaryOp::And => i & j,
                BinaryOp::Or => i | j,
                BinaryOp::Xor => i ^ j,
                BinaryOp::Shl => i << shift,
                BinaryOp::Shr => i >> shift,
                BinaryOp::Pow => panic!("pow on ints"),
            };
            wrap(r, dtype)
        }),
        DType::Bool => zip(a, b, |x, y| {
            let (p, q) = (x != 0.0, y != 0.0);
            let r = match op {
                BinaryOp::And => p && q,
                BinaryOp::Or => p || q,
                BinaryOp::Xor => p != q,
                _ => panic!("{op:?} on bool"),
            };
            if r { 1.0 } else { 0.0 }
        }),
        _ => panic!("binary on {dtype}"),
    }
}

pub fn compare(op: CompareOp, a: &Ref, b: &Ref) -> Ref {
    zip(a, b, |x, y| {
        let r = match op {
            CompareOp::Eq => x == y,
            CompareOp::Ne => x != y,
            CompareOp::Lt => x < y,
            CompareOp::Le => x <= y,
            CompareOp::Gt => x > y,
            CompareOp::Ge => x >= y,
        };
        if r { 1.0 } else { 0.0 }
    })
}

pub fn select(c: &Ref, t: &Ref, f: &Ref) -> Ref {
    Ref::new(
        t.dims.clone(),
        (0..t.v.len())
            .map(|i| if c.v[i] != 0.0 { t.v[i] } else { f.v[i] })
            .collect(),
    )
}

/// Cast by the documented rules, value by value.
pub fn cast(from: DType, to: DType, x: &Ref) -> Ref {
    let is_float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    map(x, |a| {
        if from == to {
            return a;
        }
        match to {
            DType::F32 => a as f32 as f64,
            DType::F16 => f16::from_f32(a as f32).to_f64(),
            DType::BF16 => bf16::from_f32(a as f32).to_f64(),
            DType::Bool => {
                if a != 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            DType::I32 | DType::U32 | DType::U8 => {
                if is_float(from) {
                    let (lo, hi) = match to {
                        DType::I32 => (-2147483648.0, 2147483647.0),
                        DType::U32 => (0.0, 4294967295.0),
                        _ => (0.0, 255.0),
                    };
                    if a.is_nan() {
                        0.0
                    } else {
                        a.trunc().clamp(lo, hi) + 0.0
                    }
                } else {
                    wrap(a as i64, to)
                }
            }
            DType::Packed(_) | DType::Components(_) => panic!("cast to packed"),
        }
    })
}

pub fn broadcast(x: &Ref, to: &[usize]) -> Ref {
    let lead = to.len() - x.dims.len();
    let v = (0..numel(to))
        .map(|flat| {
            let oi = unravel(flat, to);
            let ii: Vec<usize> = (0..x.dims.len())
                .map(|a| if x.dims[a] == 1 { 0 } else { oi[a + lead] })
                .collect();
            x.v[ravel(&ii, &x.dims)]
        })
        .collect();
    Ref::new(to.to_vec(), v)
}

pub fn transpose(x: &Ref, perm: &[usize]) -> Ref {
    let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
    let v = (0..numel(&dims))
        .map(|flat| {
            let oi = unravel(flat, &dims);
            let mut ii = vec![0; dims.len()];
            for (a, &p) in perm.iter().enumerate() {
                ii[p] = oi[a];
            }
            x.v[ravel(&ii, &x.dims)]
        })
        .collect();
    Ref::new(dims, v)
}

pub fn slice(x: &Ref, starts: &[usize], sizes: &[usize]) -> Ref {
    let v = (0..numel(sizes))
        .map(|flat| {
            let oi = unravel(flat, sizes);
            let ii: Vec<usize> = oi.iter().zip(starts).map(|(o, s)| o + s).collect();
            x.v[ravel(&ii, &x.dims)]
        })
        .collect();
    Ref::new(sizes.to_vec(), v)
}

pub fn concat(xs: &[Ref], axis: usize) -> Ref {
    let mut dims = xs[0].dims.clone();
    dims[axis] = xs.iter().map(|x| x.dims[axis]).sum();
    let v = (0..numel(&dims))
        .map(|flat| {
            let mut ii = unravel(flat, &dims);
            let mut which = 0;
            while ii[axis] >= xs[which].dims[axis] {
                ii[axis] -= xs[which].dims[axis];
                which += 1;
            }
            xs[which].v[ravel(&ii, &xs[which].dims)]
        })
        .collect();
    Ref::new(dims, v)
}

pub fn gather(x: &Ref, idx: &Ref, axis: usize) -> Ref {
    let mut dims = x.dims[..axis].to_vec();
    dims.extend(&idx.dims);
    dims.extend(&x.dims[axis + 1..]);
    let v = (0..numel(&dims))
        .map(|flat| {
            let oi = unravel(flat, &dims);
            let ji = &oi[axis..axis + idx.dims.len()];
            let row = idx.v[ravel(ji, &idx.dims)] as usize;
            let mut ii = oi[..axis].to_vec();
            ii.push(row);
            ii.extend(&oi[axis + idx.dims.len()..]);
            x.v[ravel(&ii, &x.dims)]
        })
        .collect();
    Ref::new(dims, v)
}

pub fn take_along(x: &Ref, idx: &Ref, axis: usize) -> Ref {
    let v = (0..idx.v.len())
        .map(|flat| {
            let mut ii = unravel(flat, &idx.dims);
            ii[axis] = idx.v[flat] as usize;
            x.v[ravel(&ii, &x.dims)]
        })
        .collect();
    Ref::new(idx.dims.clone(), v)
}

pub fn dynamic_update_slice(x: &Ref, upd: &Ref, starts: &[usize]) -> Ref {
    let mut out = x.clone();
    for flat in 0..upd.v.len() {
        let ui = unravel(flat, &upd.dims);
        let oi: Vec<usize> = ui.iter().zip(starts).map(|(u, s)| u + s).collect();
        out.v[ravel(&oi, &x.dims)] = upd.v[flat];
    }
    out
}

pub fn scatter(x: &Ref, idx: &Ref, upd: &Ref, axis: usize) -> Ref {
    let mut out = x.clone();
    // Updates in order, so the last of repeated indices wins.
    for i in 0..idx.v.len() {
        for flat in 0..upd.v.len() {
            let ui = unravel(flat, &upd.dims);
            if ui[axis] != i {
                continue;
            }
            let mut oi = ui.clone();
            oi[axis] = idx.v[i] as usize;
            out.v[ravel(&oi, &x.dims)] = upd.v[flat];
        }
    }
    out
}

pub fn reduce(op: ReduceOp, dtype: DType, x: &Ref, axis: usize) -> Ref {
    let mut dims = x.dims.clone();
    let n = dims[axis];
    dims[axis] = 1;
    let mut v = Vec::new();
    let mut bound = Vec::new();
    let mut bound_f64 = Vec::new();
    for flat in 0..numel(&dims) {
        let mut ii = unravel(flat, &dims);
        let items: Vec<f64> = (0..n)
            .map(|a| {
                ii[axis] = a;
                x.v[ravel(&ii, &x.dims)]
            })
            .collect();
        let r = match (op, dtype) {
            (ReduceOp::Sum, DType::F32) => items.iter().sum(),
            (ReduceOp::Sum, _) => wrap(items.iter().map(|&a| a as i64).sum(), dtype),
            (ReduceOp::Max, DType::F32) => items
                .iter()
                .fold(f64::NEG_INFINITY, |m, &a| fmax(m, a, true)),
            (ReduceOp::Min, DType::F32) => {
                items.iter().fold(f64::INFINITY, |m, &a| fmax(m, a, false))
            }
            (ReduceOp::Max, DType::I32) => items.iter().fold(-2147483648.0, |m: f64, &a| m.max(a)),
            (ReduceOp::Max, _) => items.iter().fold(0.0, |m: f64, &a| m.max(a)),
            (ReduceOp::Min, DType::I32) => items.iter().fold(2147483647.0, |m: f64, &a| m.min(a)),
            (ReduceOp::Min, _) => items.iter().fold(4294967295.0, |m: f64, &a| m.min(a)),
        };
        let mag: f64 = items.iter().map(|a| a.abs()).sum();
        bound.push((n as f64 + 1.0) * F32_UNIT * mag);
        bound_f64.push(F32_UNIT * r.abs() + n as f64 * 1e-15 * mag);
        v.push(r);
    }
    let mut out = Ref::new(dims, v);
    if op == ReduceOp::Sum && dtype == DType::F32 {
        out.bound = Some(bound);
        out.bound_f64 = Some(bound_f64);
    }
    out
}

/// Ranking for arg-max and top-k: NaN above every number; `Less` when `a` ranks first.
fn rank(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => b.partial_cmp(&a).unwrap(),
    }
}

pub fn argmax(x: &Ref, axis: usize) -> Ref {
    let mut dims = x.dims.clone();
    let n = dims[axis];
    dims[axis] = 1;
    let v = (0..numel(&dims))
        .map(|flat| {
            let mut ii = unravel(flat, &dims);
            let mut best = 0;
            for a in 0..n {
                ii[axis] = a;
                let cand = x.v[ravel(&ii, &x.dims)];
                ii[axis] = best;
                if rank(cand, x.v[ravel(&ii, &x.dims)]) == Ordering::Less {
                    best = a;
                }
            }
            best as f64
        })
        .collect();
    Ref::new(dims, v)
}

pub fn top_k(x: &Ref, k: usize) -> Ref {
    let n = *x.dims.last().unwrap();
    let mut dims = x.dims.clone();
    *dims.last_mut().unwrap() = k;
    let mut v = Vec::new();
    for row in x.v.chunks(n) {
        // Selection: k times, take the best remaining (lowest index among equals).
        let mut used = vec![false; n];
        for _ in 0..k {
            let mut best: Option<usize> = None;
            for i in 0..n {
                if used[i] {
                    continue;
                }
                if best.is_none_or(|b| rank(row[i], row[b]) == Ordering::Less) {
                    best = Some(i);
                }
            }
            let b = best.unwrap();
            used[b] = true;
            v.push(b as f64);
        }
    }
    Ref::new(dims, v)
}

/// `lhs [.., M, K]` times `rhs [.., K, N]` (or `[.., N, K]` transposed; rank 2 shared).
pub fn matmul(lhs: &Ref, rhs: &Ref, transpose_rhs: bool) -> Ref {
    let r = lhs.dims.len();
    let (m, k) = (lhs.dims[r - 2], lhs.dims[r - 1]);
    let rr = rhs.dims.len();
    let n = if transpose_rhs {
        rhs.dims[rr - 2]
    } else {
        rhs.dims[rr - 1]
    };
    let batch: usize = numel(&lhs.dims[..r - 2]);
    let shared = rr == 2;
    let mut dims = lhs.dims[..r - 2].to_vec();
    dims.extend([m, n]);
    let (mut v, mut bound, mut bound_f64) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..batch {
        let rb = if shared { 0 } else { b };
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0, 0.0);
                for p in 0..k {
                    let a = lhs.v[(b * m + i) * k + p];
                    let w = if transpose_rhs {
                        rhs.v[(rb * n + j) * k + p]
                    } else {
                        rhs.v[(rb * k + p) * n + j]
                    };
                    s += a * w;
                    mag += (a * w).abs();
                }
                v.push(s);
                bound.push((k as f64 + 1.0) * F32_UNIT * mag);
                bound_f64.push(F32_UNIT * s.abs() + k as f64 * 1e-15 * mag);
            }
        }
    }
    let mut out = Ref::new(dims, v);
    out.bound = Some(bound);
    out.bound_f64 = Some(bound_f64);
    out
}

/// `out[t] = lhs[t] . rhs[idx[t]]^T` for `lhs [T, K]`, `rhs [E, N, K]`.
pub fn indexed_matmul(lhs: &Ref, rhs: &Ref, idx: &Ref) -> Ref {
    let (t, k) = (lhs.dims[0], lhs.dims[1]);
    let n = rhs.dims[1];
    let (mut v, mut bound, mut bound_f64) = (Vec::new(), Vec::new(), Vec::new());
    for row in 0..t {
        let e = idx.v[row] as usize;
        for j in 0..n {
            let (mut s, mut mag) = (0.0, 0.0);
            for p in 0..k {
                let prod = lhs.v[row * k + p] * rhs.v[(e * n + j) * k + p];
                s += prod;
                mag += prod.abs();
            }
            v.push(s);
            bound.push((k as f64 + 1.0) * F32_UNIT * mag);
            bound_f64.push(F32_UNIT * s.abs() + k as f64 * 1e-15 * mag);
        }
    }
    let mut out = Ref::new(vec![t, n], v);
    out.bound = Some(bound);
    out.bound_f64 = Some(bound_f64);
    out
}
