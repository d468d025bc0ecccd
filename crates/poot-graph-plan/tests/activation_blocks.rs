//! The 8-bit block rewrite through the CPU oracle: `poot-eval` evaluates the rounding it writes
//! into the graph as ggml's Q8_0 rounding (scale `max |x| / 127`, ties to even, a block of zeros
//! kept zero), and each element moves by at most half its block's scale.

#![allow(clippy::unwrap_used)]

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_formats::{BlockFormat, decode_blocks};
use poot_graph_ir::{Builder, DType, GgmlType, Graph, Outputs, TensorType, TraceLimits, ops};
use poot_graph_plan::Target;
use poot_graph_plan::activation_blocks::round_activation_blocks;

const ROWS: usize = 20;
const K: usize = 96;
const N: usize = 24;

/// Deterministic values in [-2, 2), with elements that land exactly between two integers once
/// scaled, and a block of zeros.
fn left_side() -> Vec<f32> {
    let mut s = 0x2545_f491_4f6c_dd1d_u64;
    let mut x: Vec<f32> = (0..ROWS * K)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    for b in x.chunks_mut(32) {
        // max |x| = 127/64 makes the scale 1/64: 2.5/64 and -3.5/64 are ties.
        b[0] = 127.0 / 64.0;
        b[1] = 2.5 / 64.0;
        b[2] = -3.5 / 64.0;
    }
    x[K..K + 32].fill(0.0);
    x
}

/// Q4_0 weights `[N, K]`, with the values they decode to.
fn weights() -> (HostTensor<'static>, Vec<f32>) {
    let b = BlockFormat::Q4_0;
    let blocks = N * K / 32;
    let mut bytes: Vec<u8> = (0..blocks * b.block_bytes())
        .map(|i| (i * 37 + 11) as u8)
        .collect();
    for (i, block) in bytes.chunks_mut(b.block_bytes()).enumerate() {
        let d = half::f16::from_f32(0.01 + 0.001 * (i % 7) as f32);
        block[..2].copy_from_slice(&d.to_le_bytes());
    }
    let mut values = vec![0.0f32; N * K];
    decode_blocks(b, &bytes, &mut values).unwrap();
    (
        HostTensor::packed(GgmlType::Q4_0, vec![N, K], bytes).unwrap(),
        values,
    )
}

fn contraction() -> Graph {
    let b = Builder::new(TraceLimits::standard(64));
    let x = b
        .constant("x", TensorType::new(DType::F32, vec![ROWS, K]))
        .unwrap();
    let w = b
        .constant(
            "w",
            TensorType::new(DType::Packed(GgmlType::Q4_0), vec![N, K]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    b.finish(Outputs::new(y)).unwrap()
}

fn run(g: &Graph, x: &[f32], w: &HostTensor<'_>) -> Vec<f32> {
    let xt = HostTensor::f32(vec![ROWS, K], x.to_vec()).unwrap();
    let mut inputs = Inputs::new();
    inputs.set_const("x".to_string(), xt.view());
    inputs.set_const("w".to_string(), w.view());
    let out = eval(g, &inputs, EvalOptions::default()).unwrap();
    out.outputs[0].to_f32_vec().unwrap()
}

#[test]
fn the_oracle_rounds_the_left_side_to_8_bit_blocks_as_ggml_does() {
    let x = left_side();
    let (w, wf) = weights();
    let traced = contraction();
    let rounded = round_activation_blocks(&traced, &Target::cpu_preset()).unwrap();
    let got = run(&rounded, &x, &w);
    let plain = run(&traced, &x, &w);
    // Q8_0's rounding of each block, done here directly.
    let mut q = Vec::with_capacity(x.len());
    let mut scales = Vec::new();
    for b in x.chunks(32) {
        let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        q.extend(b.iter().map(|v| (v * id).round_ties_even() * d));
        scales.push(d);
    }
    // The ties went to even, the zero block stayed zero.
    assert_eq!(q[1], 2.0 / 64.0);
    assert_eq!(q[2], -4.0 / 64.0);
    assert!(q[K..K + 32].iter().all(|&v| v == 0.0));
    for m in 0..ROWS {
        for n in 0..N {
            let (mut want, mut abs, mut moved) = (0f64, 0f64, 0f64);
            for k in 0..K {
                let wv = f64::from(wf[n * K + k]);
                want += f64::from(q[m * K + k]) * wv;
                abs += (f64::from(q[m * K + k]) * wv).abs();
                moved += f64::from(scales[(m * K + k) / 32]) / 2.0 * wv.abs();
            }
            let g = f64::from(got[m * N + n]);
            assert!(
                (g - want).abs() <= 1e-5 * abs.max(1e-6),
                "out[{m}, {n}] = {g}, the rounded sum {want}"
            );
            // Each element moved by at most half its block's scale.
            let p = f64::from(plain[m * N + n]);
            assert!(
                (g - p).abs() <= moved * (1.0 + 1e-5) + 1e-6 * abs,
                "out[{m}, {n}] moved {} past {moved}",
                (g - p).abs()
            );
        }
    }
    assert_ne!(got, plain, "the rounding is not a no-op on these values");
}
