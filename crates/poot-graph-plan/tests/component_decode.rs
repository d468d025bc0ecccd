//! The kernel decode of every component format (GPTQ, AWQ, FP8, FP4) against the CPU reference:
//! each element's expression, evaluated on the CPU, must equal
//! `poot_formats::PackedFormat::decode_matrix` bit for bit (NaN where it is NaN), for random
//! admitted payloads and for every FP8 and FP4 code with extreme scales.

use std::num::NonZeroU32;

use poot_formats::{
    AwqFormat, ComponentBytes, Fp8Format, Fp8Scaling, GptqFormat, GptqZeros, GroupSize,
    MatrixShape, PackedFormat, ScaleType,
};
use poot_graph_ir::ComponentFormat;
use poot_graph_plan::lower::components::{
    ComponentDecodeError, ComponentParams, GROUP_INDEX_FAULT, decode_element,
};
use poot_graph_plan::lower::dequant::words_of_bytes;
use poot_kernel::build::{KernelBuilder, u32c};
use poot_kernel::expr_eval::{Env, Value};
use poot_kernel::{Expr, Ty};

fn group(n: u32) -> GroupSize {
    GroupSize::Elems(NonZeroU32::new(n).expect("nonzero"))
}

/// Decodes every element of a `shape` weight through the kernel expression and the reference
/// and compares them; returns how many matched (all, or it panics).
fn check(format: PackedFormat, shape: MatrixShape, parts: &[(&'static str, Vec<u8>)]) -> usize {
    let cf = ComponentFormat::new(format).expect("a component format");
    let dims = [shape.n_rows, shape.k_cols];
    let mut kb = KernelBuilder::new("component_decode_test", 1);
    let params = ComponentParams::declare(cf, &dims, &mut kb).expect("declares");
    let n_var = kb.var(Ty::U32, u32c(0));
    let k_var = kb.var(Ty::U32, u32c(0));
    let decoded = decode_element(cf, shape, &params, Expr::Var(n_var), Expr::Var(k_var))
        .expect("components bound");
    let kernel = kb.finish();
    assert_eq!(kernel.type_of(&decoded.value), Ok(Ty::F32), "{format}");

    let words: Vec<(poot_kernel::ParamId, Vec<u32>)> = params
        .iter()
        .map(|(role, p)| {
            let (_, bytes) = parts
                .iter()
                .find(|(r, _)| *r == role)
                .expect("every component has bytes");
            (p, words_of_bytes(bytes))
        })
        .collect();
    let mut env = Env::new();
    for (p, w) in &words {
        env.bind(*p, poot_kernel::Word::U32, w);
    }
    let bytes: Vec<ComponentBytes<'_>> = parts
        .iter()
        .map(|(n, b)| ComponentBytes::new(n, b))
        .collect();
    let mut want = vec![0f32; shape.n_rows * shape.k_cols];
    format
        .decode_matrix(shape, &bytes, &mut want)
        .expect("reference decode");
    for n in 0..shape.n_rows {
        env.set_var(n_var, Value::U32(n as u32));
        for k in 0..shape.k_cols {
            env.set_var(k_var, Value::U32(k as u32));
            for c in &decoded.checks {
                assert_eq!(
                    env.eval(&c.out_of_range),
                    Ok(Value::Bool(false)),
                    "{format} n {n} k {k}: a valid weight trips a check"
                );
            }
            let got = env
                .eval_f32(&decoded.value)
                .unwrap_or_else(|e| panic!("{format} n {n} k {k}: {e}"));
            let w = want[n * shape.k_cols + k];
            let same = if w.is_nan() {
                got.is_nan()
            } else {
                got.to_bits() == w.to_bits()
            };
            assert!(
                same,
                "{format} n {n} k {k}: got {got:e} ({:#010x}), want {w:e} ({:#010x})",
                got.to_bits(),
                w.to_bits()
            );
        }
    }
    want.len()
}

fn formats() -> Vec<PackedFormat> {
    let gptq = |group, act_order, zeros| {
        PackedFormat::Gptq(GptqFormat {
            group,
            act_order,
            zeros,
        })
    };
    let fp8 = |scaling, scale_type| {
        PackedFormat::Fp8(Fp8Format {
            scaling,
            scale_type,
        })
    };
    vec![
        gptq(group(32), false, GptqZeros::V1PlusOne),
        gptq(group(32), true, GptqZeros::V1PlusOne),
        gptq(group(48), false, GptqZeros::V2Exact),
        gptq(GroupSize::Channel, false, GptqZeros::V1PlusOne),
        PackedFormat::Awq(AwqFormat { group: group(64) }),
        PackedFormat::Awq(AwqFormat { group: group(40) }),
        fp8(Fp8Scaling::PerChannel, ScaleType::BF16),
        fp8(Fp8Scaling::PerChannel, ScaleType::F32),
        fp8(Fp8Scaling::PerTensor, ScaleType::BF16),
        fp8(Fp8Scaling::PerTensor, ScaleType::F32),
        fp8(Fp8Scaling::Block128, ScaleType::BF16),
        fp8(Fp8Scaling::Block128, ScaleType::F32),
        PackedFormat::Fp4E2M1,
    ]
}

#[test]
fn every_format_matches_the_reference_bit_for_bit() {
    let mut total = 0;
    // A shape with partial groups and partial 128-wide tiles on both axes.
    for shape in [MatrixShape::new(16, 64), MatrixShape::new(136, 160)] {
        for (i, format) in formats().into_iter().enumerate() {
            let parts =
                poot_formats::sample::components(format, shape, 31 * i as u64).expect("sampled");
            total += check(format, shape, &parts);
        }
    }
    assert!(total > 100_000, "{total}");
}

/// Every E4M3 code (NaNs, subnormals, both zeros) against scales of both types, and every E2M1
/// code against every E8M0 scale byte (0 is the subnormal 2^-127, 0xff is NaN).
#[test]
fn every_fp8_and_fp4_code_matches_the_reference() {
    let shape = MatrixShape::new(4, 256);
    let weight: Vec<u8> = (0..4 * 256).map(|i| (i % 256) as u8).collect();
    for scale_type in [ScaleType::BF16, ScaleType::F32] {
        let format = PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::PerChannel,
            scale_type,
        });
        let scales = [1.0f32, 3.0e-3, -0.5, 65504.0];
        let scale_bytes: Vec<u8> = match scale_type {
            ScaleType::BF16 => scales
                .iter()
                .flat_map(|&s| half::bf16::from_f32(s).to_le_bytes())
                .collect(),
            ScaleType::F32 => scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
        };
        check(
            format,
            shape,
            &[("weight", weight.clone()), ("weight_scale", scale_bytes)],
        );
    }
    // 256 rows, each with every E8M0 scale once per group of 32 over its 8 groups.
    let shape = MatrixShape::new(32, 256);
    let packed: Vec<u8> = (0..32 * 128).map(|i| (i * 7 % 256) as u8).collect();
    let scales: Vec<u8> = (0..32 * 8).map(|i| i as u8).collect();
    check(
        PackedFormat::Fp4E2M1,
        shape,
        &[("weight_packed", packed), ("weight_scale", scales)],
    );
}

/// A GPTQ act-order `g_idx` entry past the scales trips the check (the kernel faults there,
/// as the oracle does), and negative entries too.
#[test]
fn a_group_index_out_of_range_trips_the_check() {
    let format = PackedFormat::Gptq(GptqFormat {
        group: group(32),
        act_order: true,
        zeros: GptqZeros::V1PlusOne,
    });
    let cf = ComponentFormat::new(format).expect("a component format");
    let shape = MatrixShape::new(8, 64);
    let mut parts = poot_formats::sample::components(format, shape, 5).expect("sampled");
    let g_idx = &mut parts[3].1;
    g_idx[4 * 10..4 * 11].copy_from_slice(&2i32.to_le_bytes());
    g_idx[4 * 20..4 * 21].copy_from_slice(&(-1i32).to_le_bytes());
    let mut kb = KernelBuilder::new("component_decode_test", 1);
    let params = ComponentParams::declare(cf, &[8, 64], &mut kb).expect("declares");
    let k_var = kb.var(Ty::U32, u32c(0));
    let decoded = decode_element(cf, shape, &params, u32c(3), Expr::Var(k_var)).expect("bound");
    assert_eq!(decoded.checks.len(), 1);
    assert_eq!(decoded.checks[0].fault, GROUP_INDEX_FAULT);
    let words: Vec<Vec<u32>> = parts.iter().map(|(_, b)| words_of_bytes(b)).collect();
    let mut env = Env::new();
    for ((_, p), w) in params.iter().zip(&words) {
        env.bind(p, poot_kernel::Word::U32, w);
    }
    for k in 0..64u32 {
        env.set_var(k_var, Value::U32(k));
        let tripped = env.eval(&decoded.checks[0].out_of_range) == Ok(Value::Bool(true));
        assert_eq!(tripped, k == 10 || k == 20, "k {k}");
        // The clamped read stays in bounds, so the lane that faults still evaluates.
        assert!(env.eval_f32(&decoded.value).is_ok(), "k {k}");
    }
    // A parameter set without g_idx cannot decode act-order.
    let mut partial = ComponentParams::new();
    for (role, p) in params.iter().take(3) {
        partial.insert(role, p);
    }
    assert_eq!(
        decode_element(cf, shape, &partial, u32c(0), u32c(0)),
        Err(ComponentDecodeError::MissingComponent {
            format: cf,
            component: "g_idx"
        })
    );
}
