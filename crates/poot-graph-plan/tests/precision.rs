//! The half-precision rewrite through the CPU oracle: the rounding it writes into the graph is
//! evaluated by `poot-eval` bit for bit as an explicit rounding, and moves a contraction by at
//! most the bound the docs state (2^-11 of the sum of |products| for f16, 2^-8 for bf16; for
//! f16 also 2^-25 of the sum of |weights|, for left-side elements below its normal range).

#![allow(clippy::unwrap_used)]

use half::{bf16, f16};
use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::{Builder, DType, Graph, Outputs, TensorType, TraceLimits, ops};
use poot_graph_plan::precision::{half_operand, round_half_operands};
use poot_graph_plan::{MatrixUnits, Target};

const ROWS: usize = 24;
const K: usize = 96;
const N: usize = 40;

/// Deterministic values in [-2, 2) with a spread of magnitudes (so rounding is not exact).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// The weights as stored in `dtype`, and as the f32 values they hold.
fn weights(dtype: DType) -> (HostTensor<'static>, Vec<f32>) {
    let v = values(7, N * K);
    match dtype {
        DType::F16 => {
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            let f = h.iter().map(|x| x.to_f32()).collect();
            (HostTensor::f16(vec![N, K], h).unwrap(), f)
        }
        _ => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            let f = h.iter().map(|x| x.to_f32()).collect();
            (HostTensor::bf16(vec![N, K], h).unwrap(), f)
        }
    }
}

/// `x @ w^T` for constants `x [ROWS, K]` (f32) and `w [N, K]` of `dtype`, the left side first
/// normalized when `norm`, and rounded to `dtype` by explicit casts when `explicit`.
fn contraction(dtype: DType, norm: bool, explicit: bool) -> Graph {
    let b = Builder::new(TraceLimits::standard(64));
    let x = b
        .constant("x", TensorType::new(DType::F32, vec![ROWS, K]))
        .unwrap();
    let w = b.constant("w", TensorType::new(dtype, vec![N, K])).unwrap();
    let mut h = x;
    if norm {
        let n = b
            .constant("n", TensorType::new(DType::F32, vec![K]))
            .unwrap();
        h = ops::rmsnorm(&b, x, n, 1e-6).unwrap();
    }
    if explicit {
        h = b.cast(b.cast(h, dtype).unwrap(), DType::F32).unwrap();
    }
    let y = ops::linear(&b, h, w, None).unwrap();
    b.finish(Outputs::new(y)).unwrap()
}

fn run(g: &Graph, x: &[f32], w: &HostTensor<'_>) -> Vec<f32> {
    let xt = HostTensor::f32(vec![ROWS, K], x.to_vec()).unwrap();
    let nt = HostTensor::f32(vec![K], values(11, K)).unwrap();
    let mut inputs = Inputs::new();
    inputs.set_const("x".to_string(), xt.view());
    inputs.set_const("w".to_string(), w.view());
    if g.consts().any(|(_, name, _)| name == "n") {
        inputs.set_const("n".to_string(), nt.view());
    }
    let out = eval(g, &inputs, EvalOptions::default()).unwrap();
    out.outputs[0].to_f32_vec().unwrap()
}

#[test]
fn the_rewritten_graph_rounds_its_left_side_as_explicit_casts_do() {
    let target = half_target();
    let x = values(3, ROWS * K);
    for dtype in [DType::F16, DType::BF16] {
        let (w, _) = weights(dtype);
        for norm in [false, true] {
            let traced = contraction(dtype, norm, false);
            let rounded = round_half_operands(&traced, &target).unwrap();
            let mm = rounded
                .eqns()
                .iter()
                .find(|e| matches!(e.op, poot_graph_ir::OpKind::MatMul { .. }))
                .unwrap();
            assert_eq!(half_operand(&rounded, mm.inputs[0]), Some(dtype));
            let got = run(&rounded, &x, &w);
            let want = run(&contraction(dtype, norm, true), &x, &w);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{dtype}, norm {norm}: not the explicit rounding");
            // The rounding is not a no-op on these values.
            assert_ne!(got, run(&traced, &x, &w), "{dtype}, norm {norm}");
        }
    }
}

#[test]
fn rounding_the_left_side_moves_each_sum_by_at_most_the_stated_bound() {
    let target = half_target();
    let x = values(5, ROWS * K);
    for (dtype, bound) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        let (w, wf) = weights(dtype);
        let traced = contraction(dtype, false, false);
        let rounded = round_half_operands(&traced, &target).unwrap();
        let exact = run(&traced, &x, &w);
        let half = run(&rounded, &x, &w);
        let mut worst = 0f64;
        for m in 0..ROWS {
            for n in 0..N {
                let abs: f64 = (0..K)
                    .map(|k| (f64::from(x[m * K + k]) * f64::from(wf[n * K + k])).abs())
                    .sum();
                let w_abs: f64 = (0..K).map(|k| f64::from(wf[n * K + k]).abs()).sum();
                let d = (f64::from(half[m * N + n]) - f64::from(exact[m * N + n])).abs();
                // The rounding's bound (and f16's absolute one below its normal range), plus both
                // f32 sums' own rounding (K terms each).
                let allowed = bound * abs
                    + 2f64.powi(-25) * w_abs
                    + 2.0 * K as f64 * f64::from(f32::EPSILON) * abs;
                assert!(d <= allowed, "{dtype} ({m}, {n}): {d:e} > {allowed:e}");
                worst = worst.max(d / abs);
            }
        }
        // The bound is nearly reached: the rewrite does round.
        assert!(worst > bound / 64.0, "{dtype}: worst {worst:e}");
    }
}

/// The PTX preset with contractions against half weights multiplied in half precision (the
/// opt-in `mma=half`).
fn half_target() -> Target {
    let mut t = Target::ptx_preset();
    t.tuning.gemm_matrix_units = MatrixUnits::Half;
    t
}
