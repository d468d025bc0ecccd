//! Attention with a learned sink logit per head (gpt-oss) takes the flash-attention rewrite:
//! planned for the PTX, wgpu and CPU presets, a prefill-shaped and a decode-shaped step keep no
//! scratch buffer the size of the scores `[B, H, T, S]`, and their attention kernels are the
//! fused ones (the tiled FMA kernel on PTX, where the matrix units' kernel declines a sink).
//! Without a sink the prompt takes the matrix units, whose products skip the tf32 low part of
//! keys and values widened from an f16 or bf16 cache.

#![allow(clippy::unwrap_used)]

use poot_graph_ir::ops::{self, AttentionOptions, ScoreTerms};
use poot_graph_ir::{Builder, DType, Graph, Outputs, Slot, TensorType, TraceLimits, Traced};
use poot_graph_plan::{BufferRole, Plan, Target, compile};
use poot_kernel::render::render_cuda;

const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;

fn input(b: &Builder, name: &str, dims: &[usize]) -> Traced {
    b.constant(name, TensorType::new(DType::F32, dims.to_vec()))
        .unwrap()
}

/// How the sink logits reach the attention.
#[derive(Clone, Copy, Debug)]
enum Sinks {
    /// A weight, as the checkpoint stores them.
    Weight,
    /// Computed from a weight in the graph (an element-wise op before the attention).
    Computed,
}

/// A causal attention with sinks of `tokens` new tokens over a cache of `len` positions.
fn sink_attention(tokens: usize, len: usize, sinks: Sinks) -> Graph {
    let b = Builder::new(TraceLimits::standard(4096));
    let q = input(&b, "q", &[1, HEADS, tokens, HEAD_DIM]);
    let k = input(&b, "k", &[1, KV_HEADS, len, HEAD_DIM]);
    let v = input(&b, "v", &[1, KV_HEADS, len, HEAD_DIM]);
    let logits = input(&b, "sinks", &[HEADS]);
    let logits = match sinks {
        Sinks::Weight => logits,
        Sinks::Computed => b.neg(logits).unwrap(),
    };
    let pos = b
        .slot(Slot::Pos, TensorType::new(DType::I32, vec![1, tokens]))
        .unwrap();
    let mask = ops::causal_mask(&b, pos, len, None).unwrap();
    let opts = AttentionOptions {
        n_rep: HEADS / KV_HEADS,
        scale: 0.125,
        softcap: None,
    };
    let terms = ScoreTerms {
        bias: None,
        sinks: Some(logits),
    };
    let o = ops::attention_masked_with(&b, q, k, v, mask, opts, terms).unwrap();
    b.finish(Outputs::new(o)).unwrap()
}

fn kinds(p: &Plan) -> Vec<&str> {
    p.dispatches
        .iter()
        .map(|d| p.kernels[d.kernel].kind())
        .collect()
}

fn largest_scratch(p: &Plan) -> u64 {
    p.buffers
        .iter()
        .filter(|b| b.role == BufferRole::Scratch)
        .map(|b| b.size_bytes)
        .max()
        .unwrap_or(0)
}

/// Plans `tokens` over `len` positions on `target` and checks the scores are not stored and
/// that the last kernels are `expected` (the attention, and its combine where it has one).
fn check(target: &Target, tokens: usize, len: usize, expected: &[&str]) {
    let scores_bytes = (4 * HEADS * tokens * len) as u64;
    for sinks in [Sinks::Weight, Sinks::Computed] {
        let plan = compile(&sink_attention(tokens, len, sinks), target).unwrap();
        let k = kinds(&plan);
        let what = format!("{:?} {tokens} x {len} ({sinks:?} sinks)", target.backend);
        assert!(k.ends_with(expected), "{what}: {k:?}");
        let largest = largest_scratch(&plan);
        assert!(
            largest < scores_bytes,
            "{what}: a scratch buffer of {largest} bytes, the scores are {scores_bytes}"
        );
    }
}

#[test]
fn a_prefill_with_sinks_keeps_no_scores() {
    // On the matrix units where the target has them (the sink at each row's output), else the
    // tiled FMA kernel (`attn_mma_sinks=0`).
    check(&Target::ptx_preset(), 64, 512, &["attention_mma"]);
    let mut fma = Target::ptx_preset();
    fma.tuning.attention_mma_sinks = false;
    check(&fma, 64, 512, &["attention_tiled"]);
    check(&Target::wgpu_preset(), 64, 512, &["attention_tiled"]);
    check(&Target::cpu_preset(), 64, 512, &["attention_rows"]);
}

#[test]
fn a_decode_step_with_sinks_keeps_no_scores() {
    let split = ["attention_decode", "attention_combine"];
    check(&Target::ptx_preset(), 1, 8192, &split);
    check(&Target::wgpu_preset(), 1, 8192, &split);
    let mut threaded = Target::cpu_preset();
    threaded.limits.multiprocessors = Some(8);
    check(&threaded, 1, 8192, &["attention_rows", "attention_combine"]);
}

/// A causal attention without sinks of a 64-token prompt over 512 positions whose keys and
/// values are stored as `kv` (widened to f32 before the attention, as a cache of that type is
/// read), planned for PTX.
fn prompt_attention(kv: DType) -> Plan {
    let b = Builder::new(TraceLimits::standard(4096));
    let q = input(&b, "q", &[1, HEADS, 64, HEAD_DIM]);
    let stored = |name| {
        let t = b
            .constant(name, TensorType::new(kv, vec![1, KV_HEADS, 512, HEAD_DIM]))
            .unwrap();
        if kv == DType::F32 {
            t
        } else {
            b.cast(t, DType::F32).unwrap()
        }
    };
    let (k, v) = (stored("k"), stored("v"));
    let pos = b
        .slot(Slot::Pos, TensorType::new(DType::I32, vec![1, 64]))
        .unwrap();
    let mask = ops::causal_mask(&b, pos, 512, None).unwrap();
    let opts = AttentionOptions {
        n_rep: HEADS / KV_HEADS,
        scale: 0.125,
        softcap: None,
    };
    let o = ops::attention_masked(&b, q, k, v, mask, opts).unwrap();
    compile(&b.finish(Outputs::new(o)).unwrap(), &Target::ptx_preset()).unwrap()
}

#[test]
fn without_sinks_the_prefill_keeps_the_matrix_units() {
    // The decline above is the sink's alone: the same attention without it takes `mma.sync`.
    let plan = prompt_attention(DType::F32);
    assert_eq!(kinds(&plan).last(), Some(&"attention_mma"));
}

/// The `m16n8k8` products in the rendered matrix-unit attention kernel of
/// [`prompt_attention`].
fn attention_mma_products(kv: DType) -> usize {
    let plan = prompt_attention(kv);
    let kernel = plan
        .kernels
        .iter()
        .find(|k| k.kind() == "attention_mma")
        .expect("the prompt's attention is on the matrix units");
    render_cuda(kernel).unwrap().matches("m16n8k8").count()
}

#[test]
fn keys_and_values_from_a_half_cache_skip_their_low_part() {
    // f16 and bf16 values are exact in tf32: each product is two `m16n8k8` products, not three
    // (the third multiplies by a low part that is zero). Per 8 features of the query (8 steps
    // of 64) and block of 8 positions (4 a tile): scores; per 8 positions (4 steps) and 8 value
    // features (8 blocks of 64): the weighted values.
    let per_part = 8 * 4 + 4 * 8;
    assert_eq!(attention_mma_products(DType::F32), 3 * per_part);
    assert_eq!(attention_mma_products(DType::F16), 2 * per_part);
    assert_eq!(attention_mma_products(DType::BF16), 2 * per_part);
}
