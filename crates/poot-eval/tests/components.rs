//! Component-format weights (GPTQ, AWQ, FP8, FP4) in the oracle's contraction: each output equals
//! the contraction against the weight decoded by `poot-formats`, bit for bit, since the oracle
//! decodes each row through the same decode and sums in the same order.

use std::borrow::Cow;
use std::num::NonZeroU32;

use poot_eval::{EvalError, EvalOptions, Fault, HostTensor, Inputs, TensorError, eval};
use poot_formats::{
    AwqFormat, ComponentBytes, Fp8Format, Fp8Scaling, GptqFormat, GptqZeros, GroupSize,
    MatrixShape, PackedFormat, ScaleType,
};
use poot_graph_ir::{Builder, ComponentFormat, DType, Outputs, TensorType, TraceLimits};

fn group(n: u32) -> GroupSize {
    GroupSize::Elems(NonZeroU32::new(n).expect("nonzero"))
}

fn formats() -> Vec<PackedFormat> {
    vec![
        PackedFormat::Gptq(GptqFormat {
            group: group(32),
            act_order: false,
            zeros: GptqZeros::V1PlusOne,
        }),
        PackedFormat::Gptq(GptqFormat {
            group: group(32),
            act_order: true,
            zeros: GptqZeros::V1PlusOne,
        }),
        PackedFormat::Awq(AwqFormat { group: group(64) }),
        PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::PerChannel,
            scale_type: ScaleType::BF16,
        }),
        PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::Block128,
            scale_type: ScaleType::F32,
        }),
        PackedFormat::Fp4E2M1,
    ]
}

fn parts(format: PackedFormat, shape: MatrixShape, seed: u64) -> Vec<(String, Cow<'static, [u8]>)> {
    poot_formats::sample::components(format, shape, seed)
        .expect("sampled")
        .into_iter()
        .map(|(n, b)| (n.to_string(), Cow::Owned(b)))
        .collect()
}

fn lhs(dims: &[usize]) -> HostTensor<'static> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    HostTensor::f32(dims.to_vec(), v).expect("sized")
}

/// `x @ w^T` on the oracle, `w` bound as `weight`.
fn contract(x: &HostTensor<'_>, weight: HostTensor<'_>) -> Vec<f32> {
    let b = Builder::new(TraceLimits::standard(64));
    let xv = b.constant("x", x.ty().clone()).expect("x");
    let wv = b.constant("w", weight.ty().clone()).expect("w");
    let y = b.matmul(xv, wv, true).expect("contracts");
    let g = b.finish(Outputs::new(y)).expect("graph");
    let inputs = Inputs::new()
        .with_const("x", x.view())
        .with_const("w", weight);
    let out = eval(&g, &inputs, EvalOptions::default()).expect("evaluates");
    out.outputs[0].as_f32().expect("f32").to_vec()
}

#[test]
fn the_contraction_decodes_through_poot_formats() {
    let shape = MatrixShape::new(40, 256);
    for (i, format) in formats().into_iter().enumerate() {
        let components = parts(format, shape, 7 + i as u64);
        let cf = ComponentFormat::new(format).expect("a component format");
        let w = HostTensor::components(cf, [shape.n_rows, shape.k_cols], components.clone())
            .expect("components match the format");
        let bytes: Vec<ComponentBytes<'_>> = components
            .iter()
            .map(|(n, b)| ComponentBytes::new(n, b))
            .collect();
        let mut dense = vec![0f32; shape.n_rows * shape.k_cols];
        format
            .decode_matrix(shape, &bytes, &mut dense)
            .expect("decodes");
        assert_eq!(w.to_f32_vec().expect("decodes"), dense, "{format}");
        let dense = HostTensor::f32([shape.n_rows, shape.k_cols], dense).expect("sized");
        for dims in [vec![3, 256], vec![2, 5, 256]] {
            let x = lhs(&dims);
            let got = contract(&x, w.view());
            let want = contract(&x, dense.view());
            let same = got
                .iter()
                .zip(&want)
                .all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "{format} {dims:?}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn component_sets_and_bytes_are_checked() {
    let shape = MatrixShape::new(16, 64);
    let format = PackedFormat::Gptq(GptqFormat {
        group: group(32),
        act_order: true,
        zeros: GptqZeros::V1PlusOne,
    });
    let cf = ComponentFormat::new(format).expect("a component format");
    let good = parts(format, shape, 1);
    // Missing g_idx (act-order needs it), and a short scales tensor.
    let missing: Vec<_> = good.iter().take(3).cloned().collect();
    assert!(matches!(
        HostTensor::components(cf, [16, 64], missing),
        Err(TensorError::Components { .. })
    ));
    let mut short = good.clone();
    short[2].1 = Cow::Owned(vec![0u8; 10]);
    assert!(matches!(
        HostTensor::components(cf, [16, 64], short),
        Err(TensorError::Components { .. })
    ));
    // The stored bytes round-trip: components back to back in the format's order.
    let t = HostTensor::components(cf, [16, 64], good).expect("valid");
    let bytes = t.to_le_bytes();
    let back = HostTensor::from_le_bytes(t.ty().clone(), bytes).expect("same size");
    assert_eq!(back, t);
}

#[test]
fn a_group_index_past_the_scales_is_a_decode_fault() {
    let shape = MatrixShape::new(16, 64);
    let format = PackedFormat::Gptq(GptqFormat {
        group: group(32),
        act_order: true,
        zeros: GptqZeros::V1PlusOne,
    });
    let cf = ComponentFormat::new(format).expect("a component format");
    let mut bad = parts(format, shape, 2);
    let mut g_idx = bad[3].1.to_vec();
    g_idx[40..44].copy_from_slice(&2i32.to_le_bytes());
    bad[3].1 = Cow::Owned(g_idx);
    let w = HostTensor::components(cf, [16, 64], bad).expect("sizes fit");
    let b = Builder::new(TraceLimits::standard(64));
    let xv = b
        .constant("x", TensorType::new(DType::F32, vec![1, 64]))
        .expect("x");
    let wv = b.constant("w", w.ty().clone()).expect("w");
    let y = b.matmul(xv, wv, true).expect("contracts");
    let g = b.finish(Outputs::new(y)).expect("graph");
    let inputs = Inputs::new()
        .with_const("x", lhs(&[1, 64]))
        .with_const("w", w);
    match eval(&g, &inputs, EvalOptions::default()) {
        Err(EvalError::Fault { fault, .. })
            if matches!(
                *fault,
                Fault::Decode(poot_eval::DecodeError::Components { .. })
            ) => {}
        other => panic!("expected a decode fault, got {other:?}"),
    }
}
