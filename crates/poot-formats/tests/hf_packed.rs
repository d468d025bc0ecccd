//! Hugging Face packed layouts against independent numpy references written from the published
//! layouts (scripts/ref/gen_format_fixtures.py), bit for bit in f32:
//!
//! - GPTQ / AWQ: the reference computes `scale * (q - zero)` in float64, which is exact and equal
//!   to its f32 rounding (an f16 times an int of at most 5 bits fits f32's significand); the
//!   decode must give that exact value.
//! - FP8: the reference is one numpy float32 multiply, `e4m3(w) * scale` (IEEE round to nearest
//!   even); the decode must give the same bits. NaN weight codes must decode to NaN.
//! - E2M1: `e2m1 * e8m0` as one f32 multiply (exact in range; 6 * 2^127 overflows to inf).

mod common;

use std::num::NonZeroU32;

use common::{assert_bits_eq, read_arrays};
use poot_formats::{
    AwqFormat, ComponentBytes, ComponentInfo, DenseType, FormatError, Fp8Format, Fp8Scaling,
    GptqFormat, GptqZeros, GroupSize, MatrixShape, PackedFormat, ScaleType,
};

fn dense_type(dtype: &str) -> DenseType {
    match dtype {
        "u8" => DenseType::U8,
        "i32" => DenseType::I32,
        "f16" => DenseType::F16,
        "bf16" => DenseType::BF16,
        "f32" => DenseType::F32,
        "f8_e4m3" => DenseType::F8E4M3,
        other => panic!("fixture dtype {other}"),
    }
}

/// Decodes a fixture case as a whole matrix and row by row, checks components' dtypes and shapes
/// and the inferred shape, and compares with the reference. Returns the values compared.
fn check_case(case: &str, format: PackedFormat, shape: MatrixShape) -> usize {
    let arrays = read_arrays(&format!("hf_packed/{case}.bin"));
    let parts: Vec<ComponentBytes<'_>> = arrays
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "meta" | "expected"))
        .map(|(name, a)| ComponentBytes::new(name, &a.bytes))
        .collect();
    let infos: Vec<ComponentInfo<'_>> = arrays
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "meta" | "expected"))
        .map(|(name, a)| ComponentInfo {
            name,
            dtype: dense_type(&a.dtype),
            dims: &a.dims,
        })
        .collect();
    format
        .check_components(shape, &infos)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(
        format.infer_shape(&infos).expect("main component present"),
        shape,
        "{case}"
    );

    let want = arrays["expected"].f32s();
    let mut got = vec![0f32; shape.n_rows * shape.k_cols];
    format
        .decode_matrix(shape, &parts, &mut got)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let compared = assert_bits_eq(case, &got, &want);

    let mut row = vec![0f32; shape.k_cols];
    for r in [0, shape.n_rows / 2, shape.n_rows - 1] {
        format
            .decode_row(shape, &parts, r, &mut row)
            .unwrap_or_else(|e| panic!("{case} row {r}: {e}"));
        assert_bits_eq(
            &format!("{case} row {r}"),
            &row,
            &want[r * shape.k_cols..(r + 1) * shape.k_cols],
        );
    }
    compared
}

fn group(n: u32) -> GroupSize {
    GroupSize::Elems(NonZeroU32::new(n).expect("nonzero group"))
}

fn gptq(group: GroupSize, act_order: bool, zeros: GptqZeros) -> PackedFormat {
    PackedFormat::Gptq(GptqFormat {
        group,
        act_order,
        zeros,
    })
}

#[test]
fn gptq_without_act_order() {
    let shape = MatrixShape::new(32, 256);
    let n = check_case(
        "gptq_g32",
        gptq(group(32), false, GptqZeros::V1PlusOne),
        shape,
    );
    // The same layout with its (trivial) g_idx stored, as most checkpoints do.
    let m = check_case(
        "gptq_g32_gidx",
        gptq(group(32), false, GptqZeros::V1PlusOne),
        shape,
    );
    let v2 = check_case(
        "gptq_g32_v2",
        gptq(group(32), false, GptqZeros::V2Exact),
        MatrixShape::new(16, 128),
    );
    let ch = check_case(
        "gptq_channel",
        gptq(GroupSize::Channel, false, GptqZeros::V1PlusOne),
        MatrixShape::new(16, 128),
    );
    eprintln!("gptq: {} values", n + m + v2 + ch);
}

#[test]
fn gptq_with_act_order() {
    let format = gptq(group(64), true, GptqZeros::V1PlusOne);
    let shape = MatrixShape::new(32, 256);
    check_case("gptq_g64_actorder", format, shape);

    // Without its g_idx the act-order layout is refused, not decoded in the wrong group order.
    let arrays = read_arrays("hf_packed/gptq_g64_actorder.bin");
    let parts: Vec<_> = ["qweight", "qzeros", "scales"]
        .iter()
        .map(|n| ComponentBytes::new(n, &arrays[*n].bytes))
        .collect();
    let mut out = vec![0f32; 32 * 256];
    assert!(matches!(
        format.decode_matrix(shape, &parts, &mut out),
        Err(FormatError::MissingComponent {
            component: "g_idx",
            ..
        })
    ));
    // A g_idx entry past the last group is a typed error.
    let mut g_idx = arrays["g_idx"].bytes.clone();
    g_idx[4 * 7..4 * 8].copy_from_slice(&4i32.to_le_bytes());
    let mut bad = parts.clone();
    bad.push(ComponentBytes::new("g_idx", &g_idx));
    assert!(matches!(
        format.decode_matrix(shape, &bad, &mut out),
        Err(FormatError::GroupIndexOutOfRange {
            k_col: 7,
            group: 4,
            n_groups: 4,
            ..
        })
    ));
    let mut negative = arrays["g_idx"].bytes.clone();
    negative[4 * 7..4 * 8].copy_from_slice(&(-1i32).to_le_bytes());
    let mut bad = parts.clone();
    bad.push(ComponentBytes::new("g_idx", &negative));
    assert!(matches!(
        format.decode_row(shape, &bad, 3, &mut out[..256]),
        Err(FormatError::GroupIndexOutOfRange { group: -1, .. })
    ));
}

#[test]
fn awq() {
    check_case(
        "awq_g64",
        PackedFormat::Awq(AwqFormat { group: group(64) }),
        MatrixShape::new(32, 256),
    );
}

#[test]
fn fp8_per_channel_and_block_scales() {
    for (case, scaling, scale_type, shape) in [
        (
            "fp8_channel_bf16",
            Fp8Scaling::PerChannel,
            ScaleType::BF16,
            MatrixShape::new(24, 200),
        ),
        (
            "fp8_channel_f32",
            Fp8Scaling::PerChannel,
            ScaleType::F32,
            MatrixShape::new(24, 200),
        ),
        (
            "fp8_block_bf16",
            Fp8Scaling::Block128,
            ScaleType::BF16,
            MatrixShape::new(136, 144),
        ),
        (
            "fp8_block_f32",
            Fp8Scaling::Block128,
            ScaleType::F32,
            MatrixShape::new(136, 144),
        ),
    ] {
        let n = check_case(
            case,
            PackedFormat::Fp8(Fp8Format {
                scaling,
                scale_type,
            }),
            shape,
        );
        eprintln!("{case}: {n} values");
    }
}

#[test]
fn e2m1_with_e8m0_scales() {
    check_case("fp4_e2m1", PackedFormat::Fp4E2M1, MatrixShape::new(32, 256));
}

#[test]
fn wrong_component_sizes_are_typed_errors() {
    let arrays = read_arrays("hf_packed/awq_g64.bin");
    let format = PackedFormat::Awq(AwqFormat { group: group(64) });
    let shape = MatrixShape::new(32, 256);
    let short = &arrays["scales"].bytes[2..];
    let parts = [
        ComponentBytes::new("qweight", &arrays["qweight"].bytes),
        ComponentBytes::new("qzeros", &arrays["qzeros"].bytes),
        ComponentBytes::new("scales", short),
    ];
    let mut out = vec![0f32; 32 * 256];
    assert_eq!(
        format.decode_matrix(shape, &parts, &mut out),
        Err(FormatError::ComponentBytes {
            format,
            component: "scales",
            expected_bytes: 4 * 32 * 2,
            got_bytes: 254
        })
    );
    let mut small = vec![0f32; 10];
    let parts = [
        parts[0],
        parts[1],
        ComponentBytes::new("scales", &arrays["scales"].bytes),
    ];
    assert_eq!(
        format.decode_matrix(shape, &parts, &mut small),
        Err(FormatError::OutputLength {
            expected_elems: 32 * 256,
            got_elems: 10
        })
    );
    assert_eq!(
        format.decode_row(shape, &parts, 32, &mut out[..256]),
        Err(FormatError::RowOutOfRange {
            row: 32,
            n_rows: 32
        })
    );
}

/// The random payloads tests and device checks use decode to finite values for every format.
#[test]
fn sampled_payloads_are_admitted_and_finite() {
    let group = |n| GroupSize::Elems(NonZeroU32::new(n).expect("nonzero"));
    let formats = [
        PackedFormat::Gptq(GptqFormat {
            group: group(32),
            act_order: true,
            zeros: GptqZeros::V1PlusOne,
        }),
        PackedFormat::Gptq(GptqFormat {
            group: GroupSize::Channel,
            act_order: false,
            zeros: GptqZeros::V2Exact,
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
        PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::PerTensor,
            scale_type: ScaleType::BF16,
        }),
        PackedFormat::Fp4E2M1,
    ];
    let shape = MatrixShape::new(136, 192);
    for (i, format) in formats.into_iter().enumerate() {
        let parts = poot_formats::sample::components(format, shape, i as u64).expect("sampled");
        let bytes: Vec<ComponentBytes<'_>> = parts
            .iter()
            .map(|(n, b)| ComponentBytes::new(n, b))
            .collect();
        let mut out = vec![0f32; shape.n_rows * shape.k_cols];
        format
            .decode_matrix(shape, &bytes, &mut out)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert!(out.iter().all(|v| v.is_finite()), "{format}");
        assert!(out.iter().any(|&v| v != 0.0), "{format}");
    }
    assert!(
        poot_formats::sample::components(
            PackedFormat::Block(poot_formats::BlockFormat::Q4_0),
            shape,
            0
        )
        .is_err()
    );
}
