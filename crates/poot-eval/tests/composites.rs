//! Every composite helper of `poot_graph_ir::ops`, traced on its own, evaluated by the oracle
//! (with f32 and with f64 accumulation) and compared with an f64 reference written from the
//! textbook formula in `composite_ref` (plain loops; no helper is called to compute a
//! reference). Inputs are drawn from a seeded generator; the cases include the edge shapes
//! (size-1 axes, a single head, position or feature, batch 1), partial rotary, a rotary table
//! longer than needed, GQA with `n_rep` 1 and 2 and MQA, positions continuing from a cache,
//! sliding windows of 1 and wider than the cache, softcap, ALiBi biases, rows with one visible
//! key, and f16/bf16 stored weights (the reference decodes them as stored).
//!
//! Tolerances, relative to the largest reference magnitude of the output (see
//! `composite_ref::assert_close`); a non-finite value where the reference is finite fails at
//! any tolerance:
//! - [`TOL_ELEMENTWISE`] (1e-5): norms, activations, softmax, rope, linear (K <= 64). Each is a
//!   handful of f32 roundings (exp/tanh/erf within half an ulp, rsqrt two roundings) or an f32
//!   dot product of at most 64 terms, so the error sits near 1e-7 of the scale. The activations
//!   (`x` times a gate factor) take the largest `|x|` (`|gate * up|`) as the scale when it
//!   exceeds the largest output: the f32 error of the factor is absolute, about 2^-24, so a lone
//!   value in a tail is only as precise as `|x| * 2^-24`. (`gelu_erf` forms `1 + erf(x / sqrt 2)`
//!   in f32, which cancels for x < -3: at x = -3.96 its result is 8.5e-5 off relative to itself,
//!   3.2e-9 relative to `|x|`.)
//! - [`TOL_ATTENTION`] (3e-5): attention, which chains a dot product, a softmax and a second
//!   contraction; a softcap adds a tanh, an ALiBi bias one product and one sum.
//! - Exact for the helpers that only move, select or compare values (embed, repeat_kv,
//!   causal_mask, key_offsets, scalar_like, to_f32) and for binary_bcast of correctly rounded IEEE ops.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

mod common;
mod composite_ref;

use common::Rng;
use composite_ref::{
    AttnRef, Pairing, Trace, assert_close, assert_close_scaled, assert_exact, f32s, numel, wide,
};
use half::{bf16, f16};
use poot_eval::HostTensor;
use poot_graph_ir::ops::{self, AttentionOptions, RmsNormOptions, RopeStyle};
use poot_graph_ir::{BinaryOp, BuilderError, DType, Slot};
use proptest::prelude::*;

/// Norms, activations, softmax, rope and short contractions.
const TOL_ELEMENTWISE: f64 = 1e-5;
/// Attention: two contractions around a softmax.
const TOL_ATTENTION: f64 = 3e-5;

/// How a weight vector is stored in a case.
#[derive(Clone, Copy, Debug)]
enum Stored {
    F32,
    F16,
    BF16,
}

/// `v` stored as `how`: the tensor to bind and the exact f64 values it holds.
fn store(dims: &[usize], v: &[f32], how: Stored) -> (HostTensor<'static>, Vec<f64>) {
    match how {
        Stored::F32 => (HostTensor::f32(dims, v.to_vec()).unwrap(), wide(v)),
        Stored::F16 => {
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            let r = h.iter().map(|x| x.to_f64()).collect();
            (HostTensor::f16(dims, h).unwrap(), r)
        }
        Stored::BF16 => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            let r = h.iter().map(|x| x.to_f64()).collect();
            (HostTensor::bf16(dims, h).unwrap(), r)
        }
    }
}

/// Checks both accumulation modes' outputs against one reference; returns the worst error.
fn check_both(
    what: &str,
    got: &[HostTensor<'static>; 2],
    dims: &[usize],
    want: &[f64],
    tol: f64,
) -> f64 {
    check_both_scaled(what, got, dims, want, tol, 0.0)
}

/// [`check_both`] with the tolerance's scale at least `floor`.
fn check_both_scaled(
    what: &str,
    got: &[HostTensor<'static>; 2],
    dims: &[usize],
    want: &[f64],
    tol: f64,
    floor: f64,
) -> f64 {
    let e0 = assert_close_scaled(
        &format!("{what} (f32 acc)"),
        &got[0],
        dims,
        want,
        tol,
        floor,
    );
    let e1 = assert_close_scaled(
        &format!("{what} (f64 acc)"),
        &got[1],
        dims,
        want,
        tol,
        floor,
    );
    e0.max(e1)
}

/// The largest magnitude in `v`.
fn max_abs(v: impl IntoIterator<Item = f64>) -> f64 {
    v.into_iter().fold(0.0, |m, x| m.max(x.abs()))
}

fn report(helper: &str, worst: f64, tol: f64) {
    println!("{helper}: worst error {worst:.2e} of the scale (tolerance {tol:.0e})");
}

// ---- Norms ----

#[test]
fn rmsnorm_matches_the_reference_for_every_weight_type_and_offset() {
    let mut rng = Rng(0x5EED_0001);
    let mut worst = 0.0f64;
    // (x dims, weight storage, eps, weight_offset, x range)
    let cases: &[(&[usize], Stored, f32, f32, f64)] = &[
        (&[2, 3, 8], Stored::F32, 1e-6, 0.0, 2.0),
        (&[5, 16], Stored::BF16, 1e-5, 0.0, 3.0),
        (&[4, 16], Stored::F16, 1e-5, 0.0, 3.0),
        (&[1, 1, 1], Stored::F32, 1e-5, 0.0, 2.0), // a single feature, batch 1, one position
        (&[3, 1], Stored::F32, 1e-5, 0.0, 1e-3),   // eps dominates a tiny single feature
        (&[2, 12], Stored::BF16, 1e-6, 1.0, 2.0),  // Gemma: scale by 1 + w
        (&[8], Stored::F32, 1e-6, 1.0, 2.0),       // rank 1
        (&[3, 8], Stored::F16, 1e-6, -0.5, 2.0),
    ];
    for (n, &(dims, how, eps, offset, range)) in cases.iter().enumerate() {
        let d = *dims.last().unwrap();
        let x = f32s(&mut rng, numel(dims), -range, range);
        let w = f32s(&mut rng, d, -1.5, 1.5);
        let (wt, wr) = store(&[d], &w, how);
        let want = composite_ref::rmsnorm(&wide(&x), d, &wr, f64::from(eps), f64::from(offset));
        let mut t = Trace::new();
        let xs = t.constant("x", HostTensor::f32(dims, x).unwrap());
        let ws = t.constant("w", wt);
        let out = if offset == 0.0 {
            ops::rmsnorm(&t.b, xs, ws, eps).unwrap()
        } else {
            let opts = RmsNormOptions {
                eps,
                weight_offset: offset,
            };
            ops::rmsnorm_with(&t.b, xs, ws, opts).unwrap()
        };
        let got = t.eval(out);
        let what = format!("rmsnorm case {n} {dims:?} {how:?} offset {offset}");
        worst = worst.max(check_both(&what, &got, dims, &want, TOL_ELEMENTWISE));
    }
    report("rmsnorm", worst, TOL_ELEMENTWISE);
}

#[test]
fn layernorm_matches_the_reference_for_every_weight_type() {
    let mut rng = Rng(0x5EED_0002);
    let mut worst = 0.0f64;
    // (x dims, gamma/beta storage, eps, x offset)
    let cases: &[(&[usize], Stored, f32, f64)] = &[
        (&[2, 3, 8], Stored::F32, 1e-5, 0.0),
        (&[4, 16], Stored::BF16, 1e-5, 1.0),
        (&[3, 16], Stored::F16, 1e-6, -2.0),
        (&[1, 1, 1], Stored::F32, 1e-5, 0.0), // one feature: the variance is 0, out = beta
        (&[7], Stored::BF16, 1e-5, 3.0),      // rank 1
        (&[1, 2], Stored::F32, 1e-5, 0.0),
    ];
    for (n, &(dims, how, eps, shift)) in cases.iter().enumerate() {
        let d = *dims.last().unwrap();
        let x = f32s(&mut rng, numel(dims), shift - 2.0, shift + 2.0);
        let g = f32s(&mut rng, d, 0.5, 1.5);
        let bt = f32s(&mut rng, d, -0.5, 0.5);
        let (gt, gr) = store(&[d], &g, how);
        let (btt, br) = store(&[d], &bt, how);
        let want = composite_ref::layernorm(&wide(&x), d, &gr, &br, f64::from(eps));
        let mut t = Trace::new();
        let xs = t.constant("x", HostTensor::f32(dims, x).unwrap());
        let gs = t.constant("gamma", gt);
        let bs = t.constant("beta", btt);
        let out = ops::layernorm(&t.b, xs, gs, bs, eps).unwrap();
        let got = t.eval(out);
        let what = format!("layernorm case {n} {dims:?} {how:?}");
        worst = worst.max(check_both(&what, &got, dims, &want, TOL_ELEMENTWISE));
    }
    report("layernorm", worst, TOL_ELEMENTWISE);
}

// ---- Linear and embedding ----

#[test]
fn linear_matches_the_reference_for_every_weight_type_with_and_without_bias() {
    let mut rng = Rng(0x5EED_0003);
    let mut worst = 0.0f64;
    // (x dims, out features, weight storage, bias storage)
    let cases: &[(&[usize], usize, Stored, Option<Stored>)] = &[
        (&[2, 3, 16], 5, Stored::F32, None),
        (&[4, 16], 7, Stored::F16, Some(Stored::F32)),
        (&[16], 3, Stored::BF16, Some(Stored::BF16)), // rank-1 input
        (&[1, 1], 1, Stored::F32, Some(Stored::F16)), // K = N = 1
        (&[2, 64], 8, Stored::F32, Some(Stored::F32)),
        (&[1, 1, 9], 4, Stored::BF16, None),
    ];
    for (n, &(xd, nout, how, bias_how)) in cases.iter().enumerate() {
        let k = *xd.last().unwrap();
        let x = f32s(&mut rng, numel(xd), -1.0, 1.0);
        let w = f32s(&mut rng, nout * k, -1.0, 1.0);
        let (wt, wr) = store(&[nout, k], &w, how);
        let bias = bias_how.map(|bh| store(&[nout], &f32s(&mut rng, nout, -1.0, 1.0), bh));
        let want = composite_ref::linear(&wide(&x), k, &wr, bias.as_ref().map(|(_, r)| &r[..]));
        let mut t = Trace::new();
        let xs = t.constant("x", HostTensor::f32(xd, x).unwrap());
        let ws = t.constant("w", wt);
        let bs = bias.map(|(bt, _)| t.constant("bias", bt));
        let out = ops::linear(&t.b, xs, ws, bs).unwrap();
        let got = t.eval(out);
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = nout;
        let what = format!("linear case {n} {xd:?} -> {nout} {how:?} bias {bias_how:?}");
        worst = worst.max(check_both(&what, &got, &od, &want, TOL_ELEMENTWISE));
    }
    report("linear", worst, TOL_ELEMENTWISE);
}

#[test]
fn embed_gathers_rows_exactly_for_every_table_type() {
    let mut rng = Rng(0x5EED_0004);
    /// (rows, row width, ids dims, ids, table storage)
    type EmbedCase<'a> = (usize, usize, &'a [usize], &'a [i32], Stored);
    let cases: &[EmbedCase] = &[
        (10, 6, &[2, 3], &[0, 9, 3, 3, 1, 9], Stored::F32),
        (10, 6, &[1], &[7], Stored::F16),
        (5, 1, &[4], &[4, 0, 4, 2], Stored::BF16),
        (4, 3, &[], &[2], Stored::F32), // a scalar id
    ];
    for (n, &(rows, d, idd, ids, how)) in cases.iter().enumerate() {
        let table = f32s(&mut rng, rows * d, -2.0, 2.0);
        let (tt, tr) = store(&[rows, d], &table, how);
        let ids64: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let want = composite_ref::embed(&tr, d, &ids64);
        let mut t = Trace::new();
        let ts = t.constant("table", tt);
        let is = t.slot(Slot::Token, HostTensor::i32(idd, ids.to_vec()).unwrap());
        let out = ops::embed(&t.b, ts, is).unwrap();
        let got = t.eval(out);
        let mut od = idd.to_vec();
        od.push(d);
        for g in &got {
            assert_eq!(g.dtype(), DType::F32, "embed returns f32");
            assert_exact(&format!("embed case {n} {how:?}"), g, &od, &want);
        }
    }
}

// ---- Rotary embedding ----

struct RopeCase {
    dims: [usize; 4],
    /// Rotated features (`R`), at most the head dim.
    rot_dims: usize,
    /// Rows of the cos/sin tables (at least the largest position + 1).
    table_rows: usize,
    pos: Vec<i32>,
    table: Stored,
}

#[test]
fn rope_matches_the_reference_in_both_styles() {
    let base = 10_000.0f64;
    let cases = [
        // Full rotary, a table longer than needed, batch rows at different positions.
        RopeCase {
            dims: [2, 3, 4, 8],
            rot_dims: 8,
            table_rows: 32,
            pos: vec![0, 1, 2, 3, 7, 8, 9, 10],
            table: Stored::F32,
        },
        // Partial rotary: 4 of 10 features rotate, the rest pass through.
        RopeCase {
            dims: [1, 2, 3, 10],
            rot_dims: 4,
            table_rows: 12,
            pos: vec![5, 6, 7],
            table: Stored::F32,
        },
        // One batch row, head, position and pair; the table has exactly the rows needed.
        RopeCase {
            dims: [1, 1, 1, 2],
            rot_dims: 2,
            table_rows: 6,
            pos: vec![5],
            table: Stored::F32,
        },
        // Partial rotary of 2 features, positions not in order.
        RopeCase {
            dims: [2, 1, 2, 6],
            rot_dims: 2,
            table_rows: 9,
            pos: vec![8, 0, 3, 3],
            table: Stored::F32,
        },
        // Stored half-precision tables (the reference reads the decoded table).
        RopeCase {
            dims: [1, 2, 3, 8],
            rot_dims: 8,
            table_rows: 10,
            pos: vec![4, 5, 6],
            table: Stored::BF16,
        },
        RopeCase {
            dims: [1, 2, 2, 8],
            rot_dims: 6,
            table_rows: 10,
            pos: vec![8, 9],
            table: Stored::F16,
        },
    ];
    let mut rng = Rng(0x5EED_0005);
    let mut worst = 0.0f64;
    for (n, c) in cases.iter().enumerate() {
        let half = c.rot_dims / 2;
        // The textbook angles; the graph reads them rounded to the table's storage.
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in 0..c.table_rows {
            for i in 0..half {
                let a = composite_ref::rope_angle(p as i64, i, c.rot_dims, base);
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let (cos_t, cos_s) = store(&[c.table_rows, half], &to32(&cos), c.table);
        let (sin_t, sin_s) = store(&[c.table_rows, half], &to32(&sin), c.table);
        // An f32 table is checked against the exact angles; a half-precision one against what
        // it stores, since its rounding (~4e-3 for bf16) is the checkpoint's, not the helper's.
        let (cos_r, sin_r) = match c.table {
            Stored::F32 => (cos, sin),
            Stored::F16 | Stored::BF16 => (cos_s, sin_s),
        };
        let x = f32s(&mut rng, numel(&c.dims), -2.0, 2.0);
        let pos64: Vec<i64> = c.pos.iter().map(|&p| i64::from(p)).collect();
        for (style, pairing) in [
            (RopeStyle::HalfSplit, Pairing::HalfSplit),
            (RopeStyle::Interleaved, Pairing::Interleaved),
        ] {
            let want =
                composite_ref::rope(&wide(&x), c.dims, &pos64, &cos_r, &sin_r, half, pairing);
            let mut t = Trace::new();
            let xs = t.constant("x", HostTensor::f32(c.dims, x.clone()).unwrap());
            let cs = t.constant("cos", cos_t.clone());
            let ss = t.constant("sin", sin_t.clone());
            let ps = t.slot(
                Slot::Pos,
                HostTensor::i32([c.dims[0], c.dims[2]], c.pos.clone()).unwrap(),
            );
            let out = ops::rope(&t.b, xs, cs, ss, ps, style).unwrap();
            let got = t.eval(out);
            let what = format!("rope case {n} {:?} R={} {style:?}", c.dims, c.rot_dims);
            worst = worst.max(check_both(&what, &got, &c.dims, &want, TOL_ELEMENTWISE));
            // Features past R pass through bit for bit.
            let d = c.dims[3];
            for g in &got {
                for (i, (&o, &xi)) in g.as_f32().unwrap().iter().zip(&x).enumerate() {
                    if i % d >= c.rot_dims {
                        assert_eq!(
                            o.to_bits(),
                            xi.to_bits(),
                            "{what}: pass-through element {i}"
                        );
                    }
                }
            }
        }
    }
    report("rope", worst, TOL_ELEMENTWISE);
}

// ---- Attention ----

#[test]
fn repeat_kv_maps_query_head_h_to_kv_head_h_over_n_rep_exactly() {
    let mut rng = Rng(0x5EED_0006);
    for (dims, n_rep) in [
        ([2, 2, 3, 4], 1),
        ([2, 2, 3, 4], 2),
        ([1, 3, 2, 2], 3),
        ([1, 1, 1, 1], 4), // MQA, one position, one feature
        ([1, 1, 5, 3], 2),
    ] {
        let kv = f32s(&mut rng, numel(&dims), -3.0, 3.0);
        let want = composite_ref::repeat_kv(&wide(&kv), dims, n_rep);
        let mut t = Trace::new();
        let ks = t.constant("kv", HostTensor::f32(dims, kv).unwrap());
        let out = ops::repeat_kv(&t.b, ks, n_rep).unwrap();
        let od = [dims[0], dims[1] * n_rep, dims[2], dims[3]];
        for g in &t.eval(out) {
            assert_exact(&format!("repeat_kv {dims:?} x{n_rep}"), g, &od, &want);
        }
    }
}

/// Evaluates `causal_mask` for `pos` `[B, T]` and checks it against the predicate exactly.
fn check_causal_mask(bsz: usize, t: usize, cap: usize, pos: &[i32], window: Option<usize>) {
    let mut tr = Trace::new();
    let ps = tr.slot(Slot::Pos, HostTensor::i32([bsz, t], pos.to_vec()).unwrap());
    let out = ops::causal_mask(&tr.b, ps, cap, window).unwrap();
    for g in &tr.eval(out) {
        assert_eq!(g.dims(), &[bsz, 1, t, cap]);
        let got = g.as_bool().unwrap();
        for bi in 0..bsz {
            for ti in 0..t {
                let p = i64::from(pos[bi * t + ti]);
                for j in 0..cap {
                    let want = composite_ref::visible(p, j, window);
                    assert_eq!(
                        got[(bi * t + ti) * cap + j],
                        want,
                        "causal_mask b={bi} t={ti} pos={p} key={j} cap={cap} window={window:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn causal_mask_edge_cases_equal_the_predicate() {
    check_causal_mask(1, 1, 1, &[0], None); // one key, visible
    check_causal_mask(1, 4, 6, &[0, 1, 2, 3], Some(1)); // window 1: only the diagonal
    check_causal_mask(2, 2, 5, &[3, 4, 0, 1], Some(100)); // window wider than the cache
    check_causal_mask(1, 3, 8, &[5, 6, 7], Some(3));
    check_causal_mask(1, 2, 4, &[2, 3], Some(usize::MAX)); // saturates to i32::MAX
    check_causal_mask(1, 1, 3, &[7], None); // past the cache: every key visible
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For random positions (in any order, possibly past the cache) and windows, the mask is
    /// exactly `j <= p && (window: p - j < w)`.
    #[test]
    fn causal_mask_equals_the_predicate(
        bsz in 1usize..=3,
        t in 1usize..=4,
        cap in 1usize..=10,
        seed in any::<u64>(),
        window in prop_oneof![Just(None), (1usize..=14).prop_map(Some)],
    ) {
        let mut rng = Rng(seed);
        let pos: Vec<i32> = (0..bsz * t).map(|_| rng.int(0, cap as i64 + 2) as i32).collect();
        check_causal_mask(bsz, t, cap, &pos, window);
    }
}

/// Which keys an attention case shows each query.
enum MaskKind {
    /// `causal_mask` from the positions, `[B, 1, T, S]` broadcast over heads.
    Causal {
        pos: Vec<i32>,
        window: Option<usize>,
    },
    /// A random bool constant of the full `[B, Hq, T, S]` shape (every row keeps one key).
    Full,
}

struct AttnCase {
    name: &'static str,
    /// `[B, Hq, T, D]`.
    qdims: [usize; 4],
    hkv: usize,
    s: usize,
    mask: MaskKind,
    softcap: Option<f32>,
    /// Range of q and k values (large values make the softcap bite).
    range: f64,
}

#[test]
fn attention_masked_matches_the_reference() {
    use MaskKind::{Causal, Full};
    let causal = |pos: &[i32], window| Causal {
        pos: pos.to_vec(),
        window,
    };
    let cases = [
        AttnCase {
            name: "MHA (n_rep 1), batch rows continuing from different positions",
            qdims: [2, 2, 3, 4],
            hkv: 2,
            s: 8,
            mask: causal(&[2, 3, 4, 5, 6, 7], None),
            softcap: None,
            range: 1.5,
        },
        AttnCase {
            name: "GQA n_rep 2, prefill from 0 (position 0 sees exactly one key)",
            qdims: [1, 4, 4, 8],
            hkv: 2,
            s: 6,
            mask: causal(&[0, 1, 2, 3], None),
            softcap: None,
            range: 1.5,
        },
        AttnCase {
            name: "MQA (1 kv head), continuing",
            qdims: [1, 3, 2, 4],
            hkv: 1,
            s: 5,
            mask: causal(&[3, 4], None),
            softcap: None,
            range: 1.5,
        },
        AttnCase {
            name: "softcap 2 on large scores, GQA",
            qdims: [1, 4, 3, 4],
            hkv: 2,
            s: 7,
            mask: causal(&[4, 5, 6], None),
            softcap: Some(2.0),
            range: 4.0,
        },
        AttnCase {
            name: "sliding window 1 (every row sees exactly one key)",
            qdims: [1, 2, 3, 4],
            hkv: 1,
            s: 6,
            mask: causal(&[2, 3, 4], Some(1)),
            softcap: None,
            range: 1.5,
        },
        AttnCase {
            name: "sliding window larger than the cache",
            qdims: [2, 2, 2, 4],
            hkv: 2,
            s: 6,
            mask: causal(&[4, 5, 0, 1], Some(100)),
            softcap: None,
            range: 1.5,
        },
        AttnCase {
            name: "sliding window 3 with softcap",
            qdims: [1, 2, 2, 4],
            hkv: 1,
            s: 8,
            mask: causal(&[5, 6], Some(3)),
            softcap: Some(5.0),
            range: 3.0,
        },
        AttnCase {
            name: "decode: batch 1, one head, one position, head dim 1",
            qdims: [1, 1, 1, 1],
            hkv: 1,
            s: 7,
            mask: causal(&[5], None),
            softcap: None,
            range: 2.0,
        },
        AttnCase {
            name: "full-shape bool mask constant, GQA",
            qdims: [1, 2, 3, 4],
            hkv: 1,
            s: 5,
            mask: Full,
            softcap: None,
            range: 1.5,
        },
    ];
    let mut rng = Rng(0x5EED_0007);
    let mut worst = 0.0f64;
    for c in &cases {
        let [bsz, hq, t, d] = c.qdims;
        let kvd = [bsz, c.hkv, c.s, d];
        let n_rep = hq / c.hkv;
        let scale = 1.0 / (d as f32).sqrt();
        let q = f32s(&mut rng, numel(&c.qdims), -c.range, c.range);
        let k = f32s(&mut rng, numel(&kvd), -c.range, c.range);
        let v = f32s(&mut rng, numel(&kvd), -1.0, 1.0);
        let opts = AttnRef {
            n_rep,
            scale: f64::from(scale),
            softcap: c.softcap.map(f64::from),
        };
        let mut tr = Trace::new();
        let qs = tr.constant("q", HostTensor::f32(c.qdims, q.clone()).unwrap());
        let ks = tr.constant("k", HostTensor::f32(kvd, k.clone()).unwrap());
        let vs = tr.constant("v", HostTensor::f32(kvd, v.clone()).unwrap());
        let (mask, want) = match &c.mask {
            Causal { pos, window } => {
                let ps = tr.slot(Slot::Pos, HostTensor::i32([bsz, t], pos.clone()).unwrap());
                let m = ops::causal_mask(&tr.b, ps, c.s, *window).unwrap();
                let want = composite_ref::attention(
                    &wide(&q),
                    &wide(&k),
                    &wide(&v),
                    c.qdims,
                    c.s,
                    opts,
                    |bi, _, ti, j| composite_ref::visible(i64::from(pos[bi * t + ti]), j, *window),
                );
                (m, want)
            }
            Full => {
                let md = [bsz, hq, t, c.s];
                let mut bits: Vec<bool> = (0..numel(&md)).map(|_| rng.int(0, 1) == 1).collect();
                for row in bits.chunks_mut(c.s) {
                    row[rng.int(0, c.s as i64 - 1) as usize] = true;
                }
                let want = composite_ref::attention(
                    &wide(&q),
                    &wide(&k),
                    &wide(&v),
                    c.qdims,
                    c.s,
                    opts,
                    |bi, h, ti, j| bits[((bi * hq + h) * t + ti) * c.s + j],
                );
                (
                    tr.constant("mask", HostTensor::bool(md, bits).unwrap()),
                    want,
                )
            }
        };
        let attn = AttentionOptions {
            n_rep,
            scale,
            softcap: c.softcap,
        };
        let out = ops::attention_masked(&tr.b, qs, ks, vs, mask, attn).unwrap();
        let got = tr.eval(out);
        worst = worst.max(check_both(c.name, &got, &c.qdims, &want, TOL_ATTENTION));
    }
    report("attention_masked", worst, TOL_ATTENTION);
}

#[test]
fn a_row_with_one_visible_key_returns_that_keys_value() {
    // Window 1: each query sees only its own position, so the output is v at that position.
    let mut rng = Rng(0x5EED_0008);
    let (hq, t, s, d) = (2, 3, 5, 4);
    let q = f32s(&mut rng, hq * t * d, -3.0, 3.0);
    let k = f32s(&mut rng, s * d, -3.0, 3.0);
    let v = f32s(&mut rng, s * d, -1.0, 1.0);
    let pos = [1, 2, 4];
    let mut tr = Trace::new();
    let qs = tr.constant("q", HostTensor::f32([1, hq, t, d], q).unwrap());
    let ks = tr.constant("k", HostTensor::f32([1, 1, s, d], k).unwrap());
    let vs = tr.constant("v", HostTensor::f32([1, 1, s, d], v.clone()).unwrap());
    let ps = tr.slot(Slot::Pos, HostTensor::i32([1, t], pos.to_vec()).unwrap());
    let mask = ops::causal_mask(&tr.b, ps, s, Some(1)).unwrap();
    let opts = AttentionOptions {
        n_rep: hq,
        scale: 0.5,
        softcap: None,
    };
    let out = ops::attention_masked(&tr.b, qs, ks, vs, mask, opts).unwrap();
    let mut want = Vec::new();
    for _ in 0..hq {
        for &p in &pos {
            want.extend(wide(&v[p as usize * d..(p as usize + 1) * d]));
        }
    }
    for g in &tr.eval(out) {
        assert_close("one visible key", g, &[1, hq, t, d], &want, TOL_ATTENTION);
    }
}

/// `key_offsets` is `j - p` exactly, for positions continuing from a cache and past it.
#[test]
fn key_offsets_are_each_key_minus_the_position_exactly() {
    let (bsz, t, cap) = (2, 3, 7);
    let pos = [0, 1, 2, 4, 5, 9];
    let mut tr = Trace::new();
    let ps = tr.slot(Slot::Pos, HostTensor::i32([bsz, t], pos.to_vec()).unwrap());
    let out = ops::key_offsets(&tr.b, ps, cap).unwrap();
    let mut want = Vec::new();
    for &p in &pos {
        want.extend((0..cap).map(|j| j as f64 - f64::from(p)));
    }
    for g in &tr.eval(out) {
        assert_exact("key_offsets", g, &[bsz, 1, t, cap], &want);
    }
}

/// ALiBi through `alibi_bias` and `attention_masked_with`: each score gains `slope_h * (j - p)`
/// (slopes of a non-power-of-two head count, one of them irrational in f32), with GQA, a cache
/// continued from different positions per row, a window, a softcap (the bias comes after it),
/// and the biases large enough to decide which keys a row attends to.
#[test]
fn alibi_attention_matches_the_reference() {
    let mut rng = Rng(0x5EED_00A1);
    let mut worst = 0.0f64;
    let slopes: [f32; 6] = [
        0.25,
        0.0625,
        0.015625,
        0.003_906_25,
        0.5,
        std::f32::consts::FRAC_1_SQRT_2,
    ];
    for (name, qdims, hkv, s, pos, window, softcap) in [
        (
            "prefill from 0, MHA",
            [1usize, 6, 5, 4],
            6usize,
            8usize,
            vec![0, 1, 2, 3, 4],
            None,
            None,
        ),
        (
            "two rows continuing, GQA 3, window 4, softcap 3",
            [2, 6, 2, 4],
            2,
            12,
            vec![6, 7, 9, 10],
            Some(4),
            Some(3.0f32),
        ),
        (
            "decode at position 30",
            [1, 6, 1, 8],
            3,
            32,
            vec![30],
            None,
            None,
        ),
    ] {
        let [bsz, hq, t, d] = qdims;
        let kvd = [bsz, hkv, s, d];
        let n_rep = hq / hkv;
        let scale = 1.0 / (d as f32).sqrt();
        let q = f32s(&mut rng, numel(&qdims), -1.5, 1.5);
        let k = f32s(&mut rng, numel(&kvd), -1.5, 1.5);
        let v = f32s(&mut rng, numel(&kvd), -1.0, 1.0);
        let mut tr = Trace::new();
        let qs = tr.constant("q", HostTensor::f32(qdims, q.clone()).unwrap());
        let ks = tr.constant("k", HostTensor::f32(kvd, k.clone()).unwrap());
        let vs = tr.constant("v", HostTensor::f32(kvd, v.clone()).unwrap());
        let sl = tr.constant("slopes", HostTensor::f32([hq], slopes.to_vec()).unwrap());
        let ps = tr.slot(Slot::Pos, HostTensor::i32([bsz, t], pos.clone()).unwrap());
        let mask = ops::causal_mask(&tr.b, ps, s, window).unwrap();
        let offsets = ops::key_offsets(&tr.b, ps, s).unwrap();
        let bias = ops::alibi_bias(&tr.b, offsets, sl).unwrap();
        let opts = AttentionOptions {
            n_rep,
            scale,
            softcap,
        };
        let terms = ops::ScoreTerms {
            bias: Some(bias),
            sinks: None,
        };
        let out = ops::attention_masked_with(&tr.b, qs, ks, vs, mask, opts, terms).unwrap();
        let at = |bi: usize, ti: usize| i64::from(pos[bi * t + ti]);
        let want = composite_ref::attention_biased(
            &wide(&q),
            &wide(&k),
            &wide(&v),
            qdims,
            s,
            AttnRef {
                n_rep,
                scale: f64::from(scale),
                softcap: softcap.map(f64::from),
            },
            |bi, _, ti, j| composite_ref::visible(at(bi, ti), j, window),
            |bi, h, ti, j| f64::from(slopes[h]) * (j as f64 - at(bi, ti) as f64),
        );
        let plain = composite_ref::attention(
            &wide(&q),
            &wide(&k),
            &wide(&v),
            qdims,
            s,
            AttnRef {
                n_rep,
                scale: f64::from(scale),
                softcap: softcap.map(f64::from),
            },
            |bi, _, ti, j| composite_ref::visible(at(bi, ti), j, window),
        );
        // The biases matter: without them the reference moves by more than the tolerance.
        let moved = want
            .iter()
            .zip(&plain)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            moved > 100.0 * TOL_ATTENTION * max_abs(want.iter().copied()),
            "{name}"
        );
        worst = worst.max(check_both(
            name,
            &tr.eval(out),
            &qdims,
            &want,
            TOL_ATTENTION,
        ));
    }
    report("attention_masked_with (ALiBi)", worst, TOL_ATTENTION);
}

// ---- Softmax and activations ----

#[test]
fn softmax_matches_the_reference_on_every_axis() {
    let mut rng = Rng(0x5EED_0009);
    let mut worst = 0.0f64;
    let cases: &[(&[usize], usize, f64)] = &[
        (&[2, 3, 5], 2, 3.0),
        (&[2, 3, 5], 1, 3.0),
        (&[2, 3, 5], 0, 3.0),
        (&[4, 1], 1, 3.0), // a size-1 axis: every value is 1
        (&[1], 0, 3.0),
        (&[3, 9], 1, 80.0), // exp(80) overflows f32 unless the max is subtracted
    ];
    for &(dims, axis, range) in cases {
        let x = f32s(&mut rng, numel(dims), -range, range);
        let want = composite_ref::softmax(&wide(&x), dims, axis);
        let mut t = Trace::new();
        let xs = t.constant("x", HostTensor::f32(dims, x).unwrap());
        let out = ops::softmax(&t.b, xs, axis).unwrap();
        let got = t.eval(out);
        let what = format!("softmax {dims:?} axis {axis}");
        worst = worst.max(check_both(&what, &got, dims, &want, TOL_ELEMENTWISE));
    }
    report("softmax", worst, TOL_ELEMENTWISE);
}

/// The f64 reference of an activation.
type Reference = fn(f64) -> f64;

/// Values that probe the tails: exp overflows f32 for |x| > 88.
const TAILS: &[f32] = &[-100.0, -30.0, -5.0, -1e-3, 0.0, 1e-3, 0.5, 5.0, 30.0, 100.0];

/// Input sets for the activations: a scalar, one element, random values, the tails.
fn activation_inputs(rng: &mut Rng) -> Vec<(Vec<usize>, Vec<f32>)> {
    vec![
        (vec![], vec![rng.uniform(-4.0, 4.0) as f32]),
        (vec![1], vec![rng.uniform(-4.0, 4.0) as f32]),
        (vec![3, 17], f32s(rng, 51, -8.0, 8.0)),
        (vec![TAILS.len()], TAILS.to_vec()),
    ]
}

#[test]
fn unary_activations_match_the_reference() {
    type Helper = fn(
        &poot_graph_ir::Builder,
        poot_graph_ir::Traced,
    ) -> Result<poot_graph_ir::Traced, BuilderError>;
    let helpers: [(&str, Helper, Reference); 3] = [
        ("silu", ops::silu, composite_ref::silu),
        ("gelu_tanh", ops::gelu_tanh, composite_ref::gelu_tanh),
        ("gelu_erf", ops::gelu_erf, composite_ref::gelu_erf),
    ];
    let mut rng = Rng(0x5EED_000A);
    for (name, helper, reference) in helpers {
        let mut worst = 0.0f64;
        for (dims, x) in activation_inputs(&mut rng) {
            let want: Vec<f64> = x.iter().map(|&v| reference(f64::from(v))).collect();
            let floor = max_abs(wide(&x));
            let mut t = Trace::new();
            let xs = t.constant("x", HostTensor::f32(dims.clone(), x).unwrap());
            let out = helper(&t.b, xs).unwrap();
            let got = t.eval(out);
            let what = format!("{name} {dims:?}");
            let err = check_both_scaled(&what, &got, &dims, &want, TOL_ELEMENTWISE, floor);
            worst = worst.max(err);
        }
        report(name, worst, TOL_ELEMENTWISE);
    }
}

#[test]
fn gated_activations_match_the_reference() {
    type Helper = fn(
        &poot_graph_ir::Builder,
        poot_graph_ir::Traced,
        poot_graph_ir::Traced,
    ) -> Result<poot_graph_ir::Traced, BuilderError>;
    let helpers: [(&str, Helper, Reference); 2] = [
        ("swiglu", ops::swiglu, composite_ref::silu),
        ("geglu", ops::geglu, composite_ref::gelu_tanh),
    ];
    let mut rng = Rng(0x5EED_000B);
    for (name, helper, gate_fn) in helpers {
        let mut worst = 0.0f64;
        for (dims, gate) in activation_inputs(&mut rng) {
            let up = f32s(&mut rng, gate.len(), -2.0, 2.0);
            let want: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(&g, &u)| gate_fn(f64::from(g)) * f64::from(u))
                .collect();
            let floor = max_abs(
                gate.iter()
                    .zip(&up)
                    .map(|(&g, &u)| f64::from(g) * f64::from(u)),
            );
            let mut t = Trace::new();
            let gs = t.constant("gate", HostTensor::f32(dims.clone(), gate).unwrap());
            let us = t.constant("up", HostTensor::f32(dims.clone(), up).unwrap());
            let out = helper(&t.b, gs, us).unwrap();
            let got = t.eval(out);
            let what = format!("{name} {dims:?}");
            let err = check_both_scaled(&what, &got, &dims, &want, TOL_ELEMENTWISE, floor);
            worst = worst.max(err);
        }
        report(name, worst, TOL_ELEMENTWISE);
    }
}

// ---- Broadcasting and small helpers ----

#[test]
fn broadcast_shape_follows_numpy() {
    type ShapeCase<'a> = (&'a [usize], &'a [usize], Option<&'a [usize]>);
    let cases: &[ShapeCase] = &[
        (&[], &[], Some(&[])),
        (&[3], &[], Some(&[3])),
        (&[], &[2, 1], Some(&[2, 1])),
        (&[2, 1], &[1, 3], Some(&[2, 3])),
        (&[3, 1, 4], &[2, 1], Some(&[3, 2, 4])),
        (&[1, 1], &[1], Some(&[1, 1])),
        (&[0], &[1], Some(&[0])),
        (&[2], &[3], None),
        (&[0], &[2], None),
        (&[4, 3], &[4], None),
    ];
    for &(a, b, want) in cases {
        assert_eq!(
            ops::broadcast_shape(a, b).as_deref(),
            want,
            "{a:?} with {b:?}"
        );
        assert_eq!(
            ops::broadcast_shape(b, a).as_deref(),
            want,
            "{b:?} with {a:?}"
        );
    }
}

#[test]
fn binary_bcast_matches_the_reference_exactly() {
    let mut rng = Rng(0x5EED_000C);
    let shapes: &[(&[usize], &[usize])] = &[
        (&[3, 1, 4], &[2, 1]),
        (&[5], &[]),
        (&[], &[]),
        (&[1, 1], &[1]),
        (&[2, 3], &[2, 3]),
        (&[4, 1], &[1, 4]),
    ];
    type Reference2 = fn(f64, f64) -> f64;
    let f32_ops: [(BinaryOp, Reference2); 6] = [
        (BinaryOp::Add, |a, b| a + b),
        (BinaryOp::Sub, |a, b| a - b),
        (BinaryOp::Mul, |a, b| a * b),
        (BinaryOp::Div, |a, b| a / b),
        (BinaryOp::Max, f64::max),
        (BinaryOp::Min, f64::min),
    ];
    for &(xd, yd) in shapes {
        let od = ops::broadcast_shape(xd, yd).unwrap();
        let x = f32s(&mut rng, numel(xd), -4.0, 4.0);
        // Divisors stay away from zero.
        let y: Vec<f32> = f32s(&mut rng, numel(yd), 0.5, 4.0)
            .into_iter()
            .map(|v| if rng.int(0, 1) == 1 { v } else { -v })
            .collect();
        for (op, f) in f32_ops {
            let want: Vec<f64> = (0..numel(&od))
                .map(|i| {
                    let idx = composite_ref::unravel(i, &od);
                    f(
                        composite_ref::bcast_read(&wide(&x), xd, &idx),
                        composite_ref::bcast_read(&wide(&y), yd, &idx),
                    )
                })
                .collect();
            let mut t = Trace::new();
            let xs = t.constant("x", HostTensor::f32(xd, x.clone()).unwrap());
            let ys = t.constant("y", HostTensor::f32(yd, y.clone()).unwrap());
            let out = ops::binary_bcast(&t.b, op, xs, ys).unwrap();
            for g in &t.eval(out) {
                assert_exact(&format!("binary_bcast {op:?} {xd:?} {yd:?}"), g, &od, &want);
            }
        }
    }
    // An integer op broadcasts the same way.
    let mut t = Trace::new();
    let xs = t.constant("x", HostTensor::i32([2, 1], vec![10, -20]).unwrap());
    let ys = t.constant("y", HostTensor::i32([3], vec![1, 2, 3]).unwrap());
    let out = ops::binary_bcast(&t.b, BinaryOp::Add, xs, ys).unwrap();
    for g in &t.eval(out) {
        assert_eq!(g.dims(), &[2, 3]);
        assert_eq!(g.as_i32().unwrap(), &[11, 12, 13, -19, -18, -17]);
    }
}

#[test]
fn binary_bcast_refuses_incompatible_shapes() {
    let mut t = Trace::new();
    let xs = t.constant("x", HostTensor::f32([2], vec![1.0, 2.0]).unwrap());
    let ys = t.constant("y", HostTensor::f32([3], vec![1.0, 2.0, 3.0]).unwrap());
    let before = t.b.usage();
    let err = ops::binary_bcast(&t.b, BinaryOp::Add, xs, ys).unwrap_err();
    assert!(matches!(err, BuilderError::Infer { .. }), "{err:?}");
    assert_eq!(t.b.usage(), before, "a refused call records nothing");
}

#[test]
fn scalar_like_and_to_f32_are_exact() {
    for dims in [vec![], vec![2, 3], vec![1]] {
        let mut t = Trace::new();
        let like = t.constant(
            "like",
            HostTensor::i32(dims.clone(), vec![0; numel(&dims)]).unwrap(),
        );
        let out = ops::scalar_like(&t.b, 0.25, like).unwrap();
        for g in &t.eval(out) {
            assert_eq!(g.dtype(), DType::F32);
            assert_exact("scalar_like", g, &dims, &vec![0.25; numel(&dims)]);
        }
    }
    let v = [0.1f32, -2.5, 65504.0, 1e-3, -0.0];
    for how in [Stored::F16, Stored::BF16, Stored::F32] {
        let (tt, tr) = store(&[v.len()], &v, how);
        let mut t = Trace::new();
        let xs = t.constant("x", tt);
        let out = ops::to_f32(&t.b, xs).unwrap();
        if matches!(how, Stored::F32) {
            assert_eq!(out, xs, "an f32 value is returned as is");
        }
        for g in &t.eval(out) {
            assert_eq!(g.dtype(), DType::F32);
            assert_exact(&format!("to_f32 {how:?}"), g, &[v.len()], &tr);
        }
    }
    let mut t = Trace::new();
    let xs = t.constant("x", HostTensor::i32([3], vec![-7, 0, 1 << 24]).unwrap());
    let out = ops::to_f32(&t.b, xs).unwrap();
    for g in &t.eval(out) {
        assert_exact("to_f32 i32", g, &[3], &[-7.0, 0.0, 16_777_216.0]);
    }
}
