//! The matrix-unit prompt attention's products: f32 keys and values take three tf32 products
//! each (high and low parts), keys and values widened from an f16 or bf16 cache two (their low
//! part is zero), with the same sums.

#![allow(clippy::unwrap_used)]

use poot_graph_ir::ops::{self, AttentionOptions};
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits, Traced};
use poot_graph_plan::{Target, compile};
use poot_kernel::render::render_cuda;

const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;

fn input(b: &Builder, name: &str, dims: &[usize]) -> Traced {
    b.constant(name, TensorType::new(DType::F32, dims.to_vec()))
        .unwrap()
}

/// The `m16n8k8` products in the rendered matrix-unit attention kernel of a 64-token prompt over
/// keys and values stored as `kv` (widened to f32 before the attention, as a cache of that type
/// is read).
fn attention_mma_products(kv: DType) -> usize {
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
    let plan = compile(&b.finish(Outputs::new(o)).unwrap(), &Target::ptx_preset()).unwrap();
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
