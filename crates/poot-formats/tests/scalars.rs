//! Scalar conversions against numpy/torch over every encoding (fixture from
//! scripts/ref/gen_format_fixtures.py).

mod common;

use common::{assert_bits_eq, hex, read_arrays, sha256_f32, sha256_hex};
use poot_formats::scalar::{
    bf16_to_f32, e2m1_to_f32, e4m3_to_f32, e5m2_to_f32, e8m0_to_f32, f16_to_f32,
};
use poot_formats::{DenseType, decode_dense};

#[test]
fn sixteen_bit_words_match_numpy_and_torch() {
    let arrays = read_arrays("scalars.bin");
    for (name, convert, nans) in [
        ("f16", f16_to_f32 as fn(u16) -> f32, 2 * 1023),
        ("bf16", bf16_to_f32, 2 * 127),
    ] {
        let values: Vec<f32> = (0..=u16::MAX).map(convert).collect();
        let nan_mask: Vec<u8> = values.iter().map(|v| u8::from(v.is_nan())).collect();
        let n_nan = nan_mask.iter().filter(|&&m| m == 1).count();
        assert_eq!(
            sha256_hex(&nan_mask),
            hex(&arrays[&format!("{name}_nan_sha256")].bytes),
            "{name} NaN positions"
        );
        // NaN payloads are no format's meaning: both sides hash NaN as 0x7fc00000.
        let canonical: Vec<f32> = values
            .iter()
            .map(|&v| {
                if v.is_nan() {
                    f32::from_bits(0x7fc0_0000)
                } else {
                    v
                }
            })
            .collect();
        assert_eq!(
            hex(&sha256_f32(&canonical)),
            hex(&arrays[&format!("{name}_sha256")].bytes),
            "{name} values"
        );
        assert_eq!(
            n_nan, nans,
            "{name}: every all-ones exponent with a nonzero mantissa"
        );
    }
}

#[test]
fn byte_formats_match_reference_tables() {
    let arrays = read_arrays("scalars.bin");
    let all = |f: fn(u8) -> f32| (0..=u8::MAX).map(f).collect::<Vec<f32>>();
    assert_bits_eq("e4m3", &all(e4m3_to_f32), &arrays["e4m3"].f32s());
    assert_bits_eq("e5m2", &all(e5m2_to_f32), &arrays["e5m2"].f32s());
    assert_bits_eq("e8m0", &all(e8m0_to_f32), &arrays["e8m0"].f32s());
    assert_bits_eq(
        "e2m1",
        &(0..16).map(e2m1_to_f32).collect::<Vec<_>>(),
        &arrays["e2m1"].f32s(),
    );
}

#[test]
fn decode_dense_agrees_with_scalar_helpers() {
    let bytes: Vec<u8> = (0..=255).collect();
    let mut out = vec![0f32; 256];
    decode_dense(DenseType::F8E4M3, &bytes, &mut out).expect("one byte per element");
    assert_bits_eq(
        "e4m3 dense",
        &out,
        &read_arrays("scalars.bin")["e4m3"].f32s(),
    );
    let mut out = vec![0f32; 128];
    decode_dense(DenseType::BF16, &bytes, &mut out).expect("two bytes per element");
    for (i, v) in out.iter().enumerate() {
        let want = bf16_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]));
        assert!(v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan()));
    }
}
