//! Timings for the oracle on the shapes of a 135M-parameter decoder (SmolLM-135M: d=576, 9 query
//! heads and 3 KV heads of 64, FFN 1536, 30 layers, vocab 49152, tied embeddings).
//!
//! `cargo run --release -p poot-eval --example decode_bench` prints:
//! - single contractions `[M,576] x [1536,576]^T` for M = 1 and 64, f32 and f16 weights, and the
//!   `[1,576] x [49152,576]^T` head; and the same with Q8_0 weights;
//! - a whole decode step (one token, KV capacity 256) with f32, f16 and Q8_0 weights.
//!
//! The weights are random; the graph is built from primitives only (no composite helpers).

use std::time::Instant;

use half::f16;
use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::{
    Builder, DType, GgmlType, Graph, Outputs, Slot, TensorType, TraceLimits, Traced,
};

const D: usize = 576;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HEAD_DIM: usize = 64;
const FFN: usize = 1536;
const LAYERS: usize = 30;
const VOCAB: usize = 49152;
const CAP: usize = 256;

type BuildResult<T> = Result<T, poot_graph_ir::BuilderError>;

fn rng_fill(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

fn weight(wdt: DType, name: &str, dims: &[usize], seed: u64, inputs: &mut Inputs<'static>) {
    let n: usize = dims.iter().product();
    let v = rng_fill(n, seed, 0.05);
    let t = match wdt {
        DType::F16 => HostTensor::f16(
            dims,
            v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        ),
        DType::Packed(GgmlType::Q8_0) => {
            // Blocks of an f16 scale and 32 signed bytes.
            let mut bytes = Vec::with_capacity(n / 32 * 34);
            for block in v.chunks(32) {
                bytes.extend_from_slice(&f16::from_f32(0.05 / 127.0).to_le_bytes());
                bytes.extend(block.iter().map(|&x| (x / 0.05 * 127.0) as i8 as u8));
            }
            HostTensor::packed(GgmlType::Q8_0, dims, bytes)
        }
        _ => HostTensor::f32(dims, v),
    };
    inputs.set_const(name, t.expect("weight shape"));
}

fn rmsnorm(b: &Builder, x: Traced, w: Traced) -> BuildResult<Traced> {
    let sq = b.mul(x, x)?;
    let ss = b.reduce_sum(sq, 1)?;
    let inv_d = b.broadcast(b.lit_f32(1.0 / D as f32)?, [1, 1])?;
    let eps = b.broadcast(b.lit_f32(1e-5)?, [1, 1])?;
    let r = b.rsqrt(b.add(b.mul(ss, inv_d)?, eps)?)?;
    let xn = b.mul(x, b.broadcast(r, [1, D])?)?;
    b.mul(xn, b.broadcast(w, [1, D])?)
}

fn decoder(wdt: DType) -> BuildResult<Graph> {
    let b = Builder::new(TraceLimits::standard(1));
    let tok = b.slot(Slot::Token, TensorType::new(DType::I32, [1]))?;
    let pos = b.slot(Slot::Pos, TensorType::new(DType::I32, []))?;
    let emb = b.constant("emb", TensorType::new(wdt, [VOCAB, D]))?;
    let mut x = b.gather(emb, tok, 0)?;
    if wdt == DType::F16 {
        x = b.cast(x, DType::F32)?;
    }
    let zero = b.lit_i32(0)?;
    let mut state = Vec::new();
    for l in 0..LAYERS {
        let c = |n: &str, dims: Vec<usize>| {
            b.constant(&format!("l{l}.{n}"), TensorType::new(wdt, dims))
        };
        let f = |n: &str, dims: Vec<usize>| {
            b.constant(&format!("l{l}.{n}"), TensorType::new(DType::F32, dims))
        };
        let h = rmsnorm(&b, x, f("attn_norm", vec![D])?)?;
        let q = b.matmul(h, c("q", vec![D, D])?, true)?;
        let k = b.matmul(h, c("k", vec![KV_HEADS * HEAD_DIM, D])?, true)?;
        let v = b.matmul(h, c("v", vec![KV_HEADS * HEAD_DIM, D])?, true)?;
        let cache_ty = TensorType::new(DType::F32, [1, KV_HEADS, CAP, HEAD_DIM]);
        let kc = b.state_input(&format!("l{l}.k_cache"), cache_ty.clone())?;
        let vc = b.state_input(&format!("l{l}.v_cache"), cache_ty)?;
        let k4 = b.reshape(k, [1, KV_HEADS, 1, HEAD_DIM])?;
        let v4 = b.reshape(v, [1, KV_HEADS, 1, HEAD_DIM])?;
        let kc2 = b.dynamic_update_slice(kc, k4, &[zero, zero, pos, zero])?;
        let vc2 = b.dynamic_update_slice(vc, v4, &[zero, zero, pos, zero])?;
        state.push((kc, kc2));
        state.push((vc, vc2));
        let g = HEADS / KV_HEADS;
        let q4 = b.reshape(q, [1, KV_HEADS, g, HEAD_DIM])?;
        let s = b.matmul(q4, kc2, true)?;
        let scale = b.broadcast(
            b.lit_f32(1.0 / (HEAD_DIM as f32).sqrt())?,
            [1, KV_HEADS, g, CAP],
        )?;
        let s = b.mul(s, scale)?;
        let iota = b.iota([1, KV_HEADS, g, CAP], 3, DType::I32)?;
        let mask = b.compare(
            poot_graph_ir::CompareOp::Le,
            iota,
            b.broadcast(pos, [1, KV_HEADS, g, CAP])?,
        )?;
        let ninf = b.broadcast(b.lit_f32(f32::NEG_INFINITY)?, [1, KV_HEADS, g, CAP])?;
        let s = b.select(mask, s, ninf)?;
        let m = b.broadcast(b.reduce_max(s, 3)?, [1, KV_HEADS, g, CAP])?;
        let e = b.exp(b.sub(s, m)?)?;
        let z = b.broadcast(b.reduce_sum(e, 3)?, [1, KV_HEADS, g, CAP])?;
        let p = b.div(e, z)?;
        let o = b.matmul(p, vc2, false)?;
        let o = b.reshape(o, [1, D])?;
        let o = b.matmul(o, c("o", vec![D, D])?, true)?;
        x = b.add(x, o)?;
        let h = rmsnorm(&b, x, f("ffn_norm", vec![D])?)?;
        let gate = b.matmul(h, c("gate", vec![FFN, D])?, true)?;
        let up = b.matmul(h, c("up", vec![FFN, D])?, true)?;
        let one = b.broadcast(b.lit_f32(1.0)?, [1, FFN])?;
        let silu = b.div(gate, b.add(one, b.exp(b.neg(gate)?)?)?)?;
        let down = b.matmul(b.mul(silu, up)?, c("down", vec![D, FFN])?, true)?;
        x = b.add(x, down)?;
    }
    let norm = b.constant("norm", TensorType::new(DType::F32, [D]))?;
    let h = rmsnorm(&b, x, norm)?;
    let logits = b.matmul(h, emb, true)?;
    let next = b.argmax(logits, 1)?;
    b.finish(Outputs::new(logits).and(next).with_state(&state))
}

fn decoder_inputs(wdt: DType) -> Inputs<'static> {
    let mut inputs = Inputs::new();
    weight(wdt, "emb", &[VOCAB, D], 1, &mut inputs);
    let mut seed = 2;
    for l in 0..LAYERS {
        for (n, dims) in [
            ("q", vec![D, D]),
            ("k", vec![KV_HEADS * HEAD_DIM, D]),
            ("v", vec![KV_HEADS * HEAD_DIM, D]),
            ("o", vec![D, D]),
            ("gate", vec![FFN, D]),
            ("up", vec![FFN, D]),
            ("down", vec![D, FFN]),
        ] {
            seed += 1;
            weight(wdt, &format!("l{l}.{n}"), &dims, seed, &mut inputs);
        }
        for n in ["attn_norm", "ffn_norm"] {
            inputs.set_const(
                format!("l{l}.{n}"),
                HostTensor::f32([D], vec![1.0; D]).expect("norm"),
            );
        }
        for n in ["k_cache", "v_cache"] {
            seed += 1;
            let cache = rng_fill(KV_HEADS * CAP * HEAD_DIM, seed, 1.0);
            inputs.set_state(
                format!("l{l}.{n}"),
                HostTensor::f32([1, KV_HEADS, CAP, HEAD_DIM], cache).expect("cache"),
            );
        }
    }
    inputs.set_const("norm", HostTensor::f32([D], vec![1.0; D]).expect("norm"));
    inputs.set_slot(Slot::Token, HostTensor::i32([1], vec![42]).expect("token"));
    inputs.set_slot(
        Slot::Pos,
        HostTensor::i32([], vec![(CAP - 1) as i32]).expect("pos"),
    );
    inputs
}

fn time<T>(label: &str, reps: usize, mut f: impl FnMut() -> T) {
    let _ = f();
    let start = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(f());
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
    println!("{label:<48} {ms:9.3} ms");
}

fn contraction(m: usize, n: usize, k: usize, wdt: DType) {
    let b = Builder::new(TraceLimits::standard(1));
    let x = b
        .constant("x", TensorType::new(DType::F32, [m, k]))
        .expect("x");
    let w = b.constant("w", TensorType::new(wdt, [n, k])).expect("w");
    let y = b.matmul(x, w, true).expect("matmul");
    let g = b.finish(Outputs::new(y)).expect("graph");
    let mut inputs = Inputs::new().with_const(
        "x",
        HostTensor::f32([m, k], rng_fill(m * k, 7, 1.0)).expect("x"),
    );
    weight(wdt, "w", &[n, k], 8, &mut inputs);
    for f64_acc in [false, true] {
        let label = format!(
            "[{m},{k}] x [{n},{k}]^T {wdt} weights{}",
            if f64_acc { ", f64 acc" } else { "" }
        );
        let opts = EvalOptions {
            accumulate_f64: f64_acc,
            keep_env: false,
        };
        time(&label, 20, || eval(&g, &inputs, opts).expect("eval"));
    }
}

fn main() {
    println!("rayon threads: {}", rayon::current_num_threads());
    for wdt in [DType::F32, DType::F16, DType::Packed(GgmlType::Q8_0)] {
        contraction(1, 1536, 576, wdt);
        contraction(64, 1536, 576, wdt);
        contraction(1, VOCAB, 576, wdt);
    }
    for wdt in [DType::F32, DType::F16, DType::Packed(GgmlType::Q8_0)] {
        let g = decoder(wdt).expect("decoder graph");
        let inputs = decoder_inputs(wdt);
        let label = format!("decode step, 135M params, {wdt} weights, cap {CAP}");
        time(&label, 5, || {
            eval(&g, &inputs, EvalOptions::default()).expect("eval")
        });
    }
}
