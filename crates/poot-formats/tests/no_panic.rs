//! Property tests: any bytes handed to a decode either decode or come back as a typed error, never
//! a panic; and inputs of exactly the sizes the format describes always decode.

use std::num::NonZeroU32;

use poot_formats::{
    AwqFormat, BlockFormat, ComponentBytes, ComponentInfo, DenseType, FormatError, Fp8Format,
    Fp8Scaling, GptqFormat, GptqZeros, GroupSize, MatrixShape, PackedFormat, Presence, ScaleType,
    decode_block_row, decode_blocks, decode_dense,
};
use proptest::prelude::*;

fn block_format() -> impl Strategy<Value = BlockFormat> {
    (0..BlockFormat::ALL.len()).prop_map(|i| BlockFormat::ALL[i])
}

fn group_size() -> impl Strategy<Value = GroupSize> {
    prop_oneof![
        Just(GroupSize::Channel),
        (1u32..300).prop_map(|g| GroupSize::Elems(NonZeroU32::new(g).expect("range starts at 1"))),
    ]
}

fn packed_format() -> impl Strategy<Value = PackedFormat> {
    prop_oneof![
        block_format().prop_map(PackedFormat::Block),
        (group_size(), any::<bool>(), any::<bool>()).prop_map(|(group, act_order, v1)| {
            PackedFormat::Gptq(GptqFormat {
                group,
                act_order,
                zeros: if v1 {
                    GptqZeros::V1PlusOne
                } else {
                    GptqZeros::V2Exact
                },
            })
        }),
        group_size().prop_map(|group| PackedFormat::Awq(AwqFormat { group })),
        (any::<bool>(), any::<bool>()).prop_map(|(block, bf16)| {
            PackedFormat::Fp8(Fp8Format {
                scaling: if block {
                    Fp8Scaling::Block128
                } else {
                    Fp8Scaling::PerChannel
                },
                scale_type: if bf16 {
                    ScaleType::BF16
                } else {
                    ScaleType::F32
                },
            })
        }),
        Just(PackedFormat::Fp4E2M1),
    ]
}

/// Row counts, mostly multiples of 8 (what GPTQ and AWQ pack).
fn rows() -> impl Strategy<Value = usize> {
    prop_oneof![2 => (0usize..6).prop_map(|a| 8 * a), 1 => 0usize..40]
}

/// Column counts, mostly whole 32- or 256-element blocks.
fn cols() -> impl Strategy<Value = usize> {
    prop_oneof![2 => (0usize..10).prop_map(|b| 32 * b), 2 => (0usize..3).prop_map(|b| 256 * b), 1 => 0usize..300]
}

/// How a test perturbs one component's bytes.
#[derive(Clone, Debug)]
enum Damage {
    None,
    Drop,
    Resize(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![6 => Just(Damage::None), 1 => Just(Damage::Drop), 1 => (0usize..4096).prop_map(Damage::Resize)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn block_decode_never_panics(format in block_format(), bytes in prop::collection::vec(any::<u8>(), 0..1200),
                                 out_len in prop::option::of(0usize..2000)) {
        let whole = bytes.len() % format.block_bytes() == 0;
        let right_len = bytes.len() / format.block_bytes() * format.block_elems();
        let mut out = vec![0f32; out_len.unwrap_or(right_len)];
        let result = decode_blocks(format, &bytes, &mut out);
        prop_assert_eq!(result.is_ok(), whole && out.len() == right_len, "{:?}", result);
    }

    #[test]
    fn block_row_decode_never_panics(format in block_format(), n_rows in 0usize..5, k_cols in 0usize..600,
                                     extra in 0usize..3, row in 0usize..6, seed in any::<u8>()) {
        let shape = MatrixShape::new(n_rows, k_cols);
        let row_bytes = k_cols / format.block_elems() * format.block_bytes();
        let bytes = vec![seed; n_rows * row_bytes + extra];
        let mut out = vec![0f32; k_cols];
        let result = decode_block_row(format, shape, &bytes, row, &mut out);
        let valid = k_cols % format.block_elems() == 0 && extra == 0 && row < n_rows;
        prop_assert_eq!(result.is_ok(), valid, "{:?}", result);
    }

    #[test]
    fn packed_decode_never_panics(format in packed_format(), n_rows in rows(), k_cols in cols(),
                                  damages in prop::collection::vec(damage(), 4), fill in any::<u8>(),
                                  row in 0usize..45, g_idx_in_range in any::<bool>()) {
        let shape = MatrixShape::new(n_rows, k_cols);
        let specs = match format.components(shape) {
            Ok(specs) => specs,
            Err(e) => {
                prop_assert!(matches!(e, FormatError::ShapeNotDivisible { .. }), "{}", e);
                return Ok(());
            }
        };
        let n_groups = match format {
            PackedFormat::Gptq(g) => g.group.n_groups(k_cols),
            _ => 1,
        };
        let mut storage = Vec::new();
        for (spec, damage) in specs.iter().zip(&damages) {
            let len = spec.n_bytes().expect("small shapes");
            let mut bytes: Vec<u8> = (0..len).map(|i| fill.wrapping_add((i as u8).wrapping_mul(37))).collect();
            if spec.name == "g_idx" {
                // Valid group ids, or arbitrary words (out of range, negative).
                if g_idx_in_range {
                    for (k, word) in bytes.chunks_exact_mut(4).enumerate() {
                        word.copy_from_slice(&((k * 7 % n_groups.max(1)) as i32).to_le_bytes());
                    }
                }
            }
            match damage {
                Damage::None => storage.push((spec.name, bytes, spec.clone())),
                Damage::Drop => {}
                Damage::Resize(n) => {
                    bytes.resize(*n, fill);
                    storage.push((spec.name, bytes, spec.clone()));
                }
            }
        }
        let parts: Vec<ComponentBytes<'_>> = storage.iter().map(|(n, b, _)| ComponentBytes::new(n, b)).collect();
        let mut matrix = vec![0f32; n_rows * k_cols];
        let whole = format.decode_matrix(shape, &parts, &mut matrix);
        let mut one_row = vec![0f32; k_cols];
        let by_row = format.decode_row(shape, &parts, row, &mut one_row);

        // Exactly-sized inputs decode (GPTQ's g_idx, when present, must also name real groups).
        let complete = specs.iter().all(|s| {
            let found = storage.iter().find(|(n, _, _)| *n == s.name);
            match found {
                Some((_, b, _)) => Some(b.len()) == s.n_bytes(),
                None => s.presence == Presence::Optional,
            }
        });
        let has_g_idx = storage.iter().any(|(n, _, _)| *n == "g_idx");
        let g_idx_ok = !has_g_idx || g_idx_in_range || k_cols == 0;
        if complete && g_idx_ok {
            prop_assert!(whole.is_ok(), "{}: {:?}", format, whole);
            prop_assert_eq!(by_row.is_ok(), row < n_rows, "{}: {:?}", format, by_row);
            if let (Ok(()), true) = (&by_row, row < n_rows) {
                let want = &matrix[row * k_cols..(row + 1) * k_cols];
                prop_assert!(one_row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
            }
        }
        if !complete {
            prop_assert!(whole.is_err());
        }

        // Component checks over whatever shapes the header might claim.
        let dims: Vec<Vec<usize>> = storage.iter().map(|(_, b, s)| {
            if b.len() == s.n_bytes().unwrap_or(0) { s.dims.clone() } else { vec![b.len()] }
        }).collect();
        let infos: Vec<ComponentInfo<'_>> = storage.iter().zip(&dims)
            .map(|((n, _, s), d)| ComponentInfo { name: n, dtype: s.dtype, dims: d })
            .collect();
        let _ = format.check_components(shape, &infos);
        if let Ok(inferred) = format.infer_shape(&infos) {
            let _ = format.components(inferred);
        }
    }

    #[test]
    fn huge_shapes_are_refused_not_overflowed(format in packed_format(), n_rows in any::<usize>(), k_cols in any::<usize>(),
                                              d0 in any::<usize>(), d1 in any::<usize>(), row in any::<usize>()) {
        let shape = MatrixShape::new(n_rows, k_cols);
        let _ = format.components(shape);
        let bytes = [0u8; 64];
        let names = ["weight", "qweight", "qzeros", "scales", "g_idx", "weight_scale", "weight_scale_inv", "weight_packed"];
        let parts: Vec<_> = names.iter().map(|n| ComponentBytes::new(n, &bytes)).collect();
        let mut out = [0f32; 16];
        prop_assert!(format.decode_matrix(shape, &parts, &mut out).is_err() || n_rows.saturating_mul(k_cols) == 16);
        let _ = format.decode_row(shape, &parts, row, &mut out);
        let dims = [d0, d1];
        let infos: Vec<_> = names.iter().map(|n| ComponentInfo { name: n, dtype: DenseType::U8, dims: &dims }).collect();
        if let Ok(inferred) = format.infer_shape(&infos) {
            let _ = format.check_components(inferred, &infos);
        }
        if let PackedFormat::Block(b) = format {
            let _ = decode_block_row(b, shape, &bytes, row, &mut out);
        }
    }

    #[test]
    fn dense_decode_never_panics(dtype_index in 0..DenseType::ALL.len(), bytes in prop::collection::vec(any::<u8>(), 0..64),
                                 out_len in 0usize..70) {
        let dtype = DenseType::ALL[dtype_index];
        let mut out = vec![0f32; out_len];
        let _ = decode_dense(dtype, &bytes, &mut out);
    }
}
