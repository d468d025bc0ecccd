//! Independent f64 references for the composite helpers of `poot_graph_ir::ops`, written from the
//! textbook formulas as plain loops (never by calling a helper or sharing code with the
//! evaluator), and the harness that traces a small graph, binds its inputs, evaluates it with
//! the oracle and compares the result with a reference at a stated tolerance.
//!
//! Tensors are row-major flat slices with their dims passed alongside. Stored f16/bf16 values
//! are decoded to f64 by the caller exactly as stored, so the reference sees what the graph reads.
#![allow(dead_code)]

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::{Builder, Outputs, Slot, TraceLimits, Traced};

use crate::common::{Rng, values};

/// A graph being traced, with every input bound as it is declared.
pub struct Trace {
    pub b: Builder,
    inputs: Inputs<'static>,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace::new()
    }
}

impl Trace {
    pub fn new() -> Trace {
        Trace {
            b: Builder::new(TraceLimits::standard(64)),
            inputs: Inputs::new(),
        }
    }

    /// Declares constant `name` of `t`'s type and binds `t` to it.
    pub fn constant(&mut self, name: &str, t: HostTensor<'static>) -> Traced {
        let x = self.b.constant(name, t.ty().clone()).unwrap();
        self.inputs.set_const(name, t);
        x
    }

    /// Declares `slot` of `t`'s type and binds `t` to it.
    pub fn slot(&mut self, slot: Slot, t: HostTensor<'static>) -> Traced {
        let x = self.b.slot(slot.clone(), t.ty().clone()).unwrap();
        self.inputs.set_slot(slot, t);
        x
    }

    /// Evaluates the graph returning `out`, once with f32 and once with f64 accumulation.
    pub fn eval(self, out: Traced) -> [HostTensor<'static>; 2] {
        let graph = self.b.finish(Outputs::new(out)).unwrap();
        [false, true].map(|accumulate_f64| {
            let mut ev = eval(
                &graph,
                &self.inputs,
                EvalOptions {
                    accumulate_f64,
                    keep_env: false,
                },
            )
            .unwrap();
            ev.outputs.swap_remove(0)
        })
    }
}

/// Uniform f32 values in `[lo, hi)`.
pub fn f32s(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(lo, hi) as f32).collect()
}

/// The exact f64 values of stored f32 values.
pub fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

pub fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Checks `got` against the reference `want` of shape `dims`: every element within
/// `rel * max|want|` (the largest finite reference magnitude), and a non-finite value where the
/// reference is finite fails at any tolerance. Returns the largest error relative to that scale.
pub fn assert_close(
    what: &str,
    got: &HostTensor<'_>,
    dims: &[usize],
    want: &[f64],
    rel: f64,
) -> f64 {
    assert_close_scaled(what, got, dims, want, rel, 0.0)
}

/// [`assert_close`] with the scale raised to at least `floor`, for a value whose f32 error is
/// proportional to something other than its own magnitude (an input's, say).
pub fn assert_close_scaled(
    what: &str,
    got: &HostTensor<'_>,
    dims: &[usize],
    want: &[f64],
    rel: f64,
    floor: f64,
) -> f64 {
    assert_eq!(got.dims(), dims, "{what}: output shape");
    assert_eq!(want.len(), numel(dims), "{what}: reference length");
    let g = values(got);
    let scale = want
        .iter()
        .filter(|w| w.is_finite())
        .fold(floor, |m, w| m.max(w.abs()))
        .max(f64::MIN_POSITIVE);
    let mut worst = 0.0f64;
    for (i, (&x, &w)) in g.iter().zip(want).enumerate() {
        assert!(
            w.is_finite(),
            "{what}: the reference is not finite at element {i} ({w})"
        );
        assert!(
            x.is_finite(),
            "{what}: element {i} is {x} where the reference is finite ({w:e})"
        );
        let err = (x - w).abs() / scale;
        assert!(
            err <= rel,
            "{what}: element {i}: got {x:e}, reference {w:e}, error {err:e} of the scale \
             {scale:e} exceeds {rel:e}"
        );
        worst = worst.max(err);
    }
    worst
}

/// Checks that `got` equals the reference rounded to f32, bit for bit (`-0 == +0`).
pub fn assert_exact(what: &str, got: &HostTensor<'_>, dims: &[usize], want: &[f64]) {
    assert_eq!(got.dims(), dims, "{what}: output shape");
    assert_eq!(want.len(), numel(dims), "{what}: reference length");
    for (i, (x, &w)) in values(got).into_iter().zip(want).enumerate() {
        assert!(
            x == w as f32 as f64,
            "{what}: element {i}: got {x:e}, reference {w:e}"
        );
    }
}

// ---- Norms ----

/// RMS norm over rows of `d`: `x / sqrt(mean(x^2) + eps) * (w + offset)`.
pub fn rmsnorm(x: &[f64], d: usize, w: &[f64], eps: f64, offset: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, g)| v * inv * (g + offset)));
    }
    out
}

/// Layer norm over rows of `d` with the biased variance.
pub fn layernorm(x: &[f64], d: usize, gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            out.push((row[i] - mean) * inv * gamma[i] + beta[i]);
        }
    }
    out
}

// ---- Linear and embedding ----

/// `y[r, n] = sum_k x[r, k] w[n, k] (+ bias[n])` for every row `r` of `x`.
pub fn linear(x: &[f64], k: usize, w: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let n = w.len() / k;
    let mut out = Vec::with_capacity(x.len() / k * n);
    for row in x.chunks(k) {
        for j in 0..n {
            let mut acc = 0.0;
            for i in 0..k {
                acc += row[i] * w[j * k + i];
            }
            out.push(acc + bias.map_or(0.0, |b| b[j]));
        }
    }
    out
}

/// Rows `ids` of a table with rows of `d`.
pub fn embed(table: &[f64], d: usize, ids: &[i64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(ids.len() * d);
    for &id in ids {
        let r = usize::try_from(id).unwrap();
        out.extend_from_slice(&table[r * d..(r + 1) * d]);
    }
    out
}

// ---- Rotary embedding and attention ----

/// How the reference pairs rotated features: `(i, i + R/2)` or `(2i, 2i + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    HalfSplit,
    Interleaved,
}

/// The rotary angle of pair `i` of `rot_dims` rotated features at position `p`.
pub fn rope_angle(p: i64, i: usize, rot_dims: usize, base: f64) -> f64 {
    p as f64 * base.powf(-(2.0 * i as f64) / rot_dims as f64)
}

/// Rotates pair `i` of the first `2 * half` features of every head vector of `x`
/// `[B, H, T, D]` by the angle whose cosine and sine are `cos[p * half + i]`, `sin[...]`, with
/// `p` the absolute position `pos[b * T + t]`; the other features pass through.
pub fn rope(
    x: &[f64],
    dims: [usize; 4],
    pos: &[i64],
    cos: &[f64],
    sin: &[f64],
    half: usize,
    pairing: Pairing,
) -> Vec<f64> {
    let [bsz, h, t, d] = dims;
    let mut out = x.to_vec();
    for bi in 0..bsz {
        for hi in 0..h {
            for ti in 0..t {
                let p = usize::try_from(pos[bi * t + ti]).unwrap();
                let base = ((bi * h + hi) * t + ti) * d;
                for i in 0..half {
                    let (c, s) = (cos[p * half + i], sin[p * half + i]);
                    let (a, b) = match pairing {
                        Pairing::HalfSplit => (i, i + half),
                        Pairing::Interleaved => (2 * i, 2 * i + 1),
                    };
                    let (xa, xb) = (x[base + a], x[base + b]);
                    out[base + a] = xa * c - xb * s;
                    out[base + b] = xb * c + xa * s;
                }
            }
        }
    }
    out
}

/// Key/value head `h / n_rep` for query head `h`: `[B, Hkv, S, D]` to `[B, Hkv * n_rep, S, D]`.
pub fn repeat_kv(kv: &[f64], dims: [usize; 4], n_rep: usize) -> Vec<f64> {
    let [bsz, hkv, s, d] = dims;
    let hq = hkv * n_rep;
    let mut out = Vec::with_capacity(kv.len() * n_rep);
    for bi in 0..bsz {
        for h in 0..hq {
            let src = (bi * hkv + h / n_rep) * s * d;
            out.extend_from_slice(&kv[src..src + s * d]);
        }
    }
    out
}

/// Whether key `j` is visible from absolute position `p`: `j <= p`, and within `window` keys.
pub fn visible(p: i64, j: usize, window: Option<usize>) -> bool {
    let j = j as i128;
    let p = i128::from(p);
    j <= p && window.is_none_or(|w| p - j < w as i128)
}

/// Attention parameters of the reference.
#[derive(Clone, Copy, Debug)]
pub struct AttnRef {
    pub n_rep: usize,
    pub scale: f64,
    pub softcap: Option<f64>,
}

/// `softmax_j(score(b, h, t, j)) v[j]` over the keys `j` that `visible(b, h, t, j)` admits, with
/// `score = scale * q.k` (then `c * tanh(score / c)` under a softcap); `q` `[B, Hq, T, D]`,
/// `k`, `v` `[B, Hkv, S, D]`. Panics on a row with no visible key (it has no textbook value).
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    qdims: [usize; 4],
    s: usize,
    opts: AttnRef,
    visible: impl Fn(usize, usize, usize, usize) -> bool,
) -> Vec<f64> {
    attention_biased(q, k, v, qdims, s, opts, visible, |_, _, _, _| 0.0)
}

/// [`attention`] with `bias(b, h, t, j)` added to each score after the scale and softcap
/// (ALiBi's `slope_h * (j - p)`).
#[allow(clippy::too_many_arguments)]
pub fn attention_biased(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    qdims: [usize; 4],
    s: usize,
    opts: AttnRef,
    visible: impl Fn(usize, usize, usize, usize) -> bool,
    bias: impl Fn(usize, usize, usize, usize) -> f64,
) -> Vec<f64> {
    let [bsz, hq, t, d] = qdims;
    let hkv = hq / opts.n_rep;
    let mut out = vec![0.0; q.len()];
    for bi in 0..bsz {
        for h in 0..hq {
            let kvh = (bi * hkv + h / opts.n_rep) * s * d;
            for ti in 0..t {
                let qo = ((bi * hq + h) * t + ti) * d;
                let mut scores = Vec::new();
                for j in 0..s {
                    if !visible(bi, h, ti, j) {
                        continue;
                    }
                    let dot: f64 = (0..d).map(|e| q[qo + e] * k[kvh + j * d + e]).sum();
                    let mut sc = dot * opts.scale;
                    if let Some(c) = opts.softcap {
                        sc = c * (sc / c).tanh();
                    }
                    scores.push((j, sc + bias(bi, h, ti, j)));
                }
                assert!(!scores.is_empty(), "a reference row with no visible key");
                let m = scores.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
                let z: f64 = scores.iter().map(|&(_, s)| (s - m).exp()).sum();
                for &(j, sc) in &scores {
                    let p = (sc - m).exp() / z;
                    for e in 0..d {
                        out[qo + e] += p * v[kvh + j * d + e];
                    }
                }
            }
        }
    }
    out
}

// ---- Softmax and activations ----

/// `exp(x_i) / sum_j exp(x_j)` along `axis` of `dims` (shifted by the max, as any f64 textbook
/// implementation must be to stay finite).
pub fn softmax(x: &[f64], dims: &[usize], axis: usize) -> Vec<f64> {
    let outer: usize = dims[..axis].iter().product();
    let n = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            let m = (0..n).fold(f64::NEG_INFINITY, |m, j| m.max(x[at(j)]));
            let z: f64 = (0..n).map(|j| (x[at(j)] - m).exp()).sum();
            for j in 0..n {
                out[at(j)] = (x[at(j)] - m).exp() / z;
            }
        }
    }
    out
}

pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// GeLU, tanh approximation, in its textbook tanh form.
pub fn gelu_tanh(x: f64) -> f64 {
    let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + z.tanh())
}

/// Exact GeLU.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// `erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt` by composite Simpson's rule (2000
/// intervals, error far below 1e-10 on `[0, 6]`); `|erf(x)| = 1` to f64 precision past 6.
pub fn erf(x: f64) -> f64 {
    let a = x.abs().min(6.0);
    let n = 2000;
    let h = a / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(a);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    let v = s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt();
    v.min(1.0).copysign(x)
}

// ---- Broadcasting ----

/// The element of `x` (dims `xd`) that NumPy broadcasting reads for output index `idx`.
pub fn bcast_read(x: &[f64], xd: &[usize], idx: &[usize]) -> f64 {
    let skip = idx.len() - xd.len();
    let mut flat = 0;
    for (a, &d) in xd.iter().enumerate() {
        let i = if d == 1 { 0 } else { idx[skip + a] };
        flat = flat * d + i;
    }
    x[flat]
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
