//! E2M1 FP4 with per-32 E8M0 scales, OCP MX layout (see [`PackedFormat::Fp4E2M1`]).

use crate::FormatError;
use crate::components::MatrixShape;
use crate::packed::FP4_GROUP_ELEMS;
use crate::packed_decode::Bound;
use crate::scalar::{e2m1_to_f32, e8m0_to_f32};

/// An FP4 weight's components, length-checked against its shape.
pub(crate) struct Fp4View<'a> {
    shape: MatrixShape,
    packed: &'a [u8],
    scales: &'a [u8],
}

impl<'a> Fp4View<'a> {
    pub(crate) fn new(shape: MatrixShape, bound: &Bound<'a>) -> Result<Fp4View<'a>, FormatError> {
        Ok(Fp4View {
            shape,
            packed: bound.required("weight_packed")?,
            scales: bound.required("weight_scale")?,
        })
    }

    /// Decodes output row `n` into `out` (`K` values): `e2m1(code) * e8m0(scale)`, exact.
    pub(crate) fn decode_row(&self, n: usize, out: &mut [f32]) {
        let k_cols = self.shape.k_cols;
        let packed = &self.packed[n * (k_cols / 2)..(n + 1) * (k_cols / 2)];
        let scales =
            &self.scales[n * (k_cols / FP4_GROUP_ELEMS)..(n + 1) * (k_cols / FP4_GROUP_ELEMS)];
        for (k, y) in out.iter_mut().enumerate().take(k_cols) {
            let code = packed[k / 2] >> (4 * (k % 2));
            *y = e2m1_to_f32(code) * e8m0_to_f32(scales[k / FP4_GROUP_ELEMS]);
        }
    }
}

/// Bytes of one ggml MXFP4 block: the E8M0 scale, then 32 codes two a byte.
const MXFP4_BLOCK_BYTES: usize = 17;
/// Bytes of one block's codes in the OCP layout (two a byte).
const OCP_BLOCK_CODE_BYTES: usize = FP4_GROUP_ELEMS / 2;

/// Rewrites E2M1 codes in the OCP MX layout (two a byte, element `2i` in the low nibble of byte
/// `i`, as compressed-tensors' `weight_packed` and transformers' gpt-oss `*_blocks` store them)
/// with one E8M0 scale byte per 32 codes as ggml's MXFP4 blocks (the scale byte, then element
/// `j` in the low nibble and `j + 16` in the high nibble of byte `1 + j`): the same codes and
/// scale bytes, moved, never decoded. Both read `e2m1(code) * 2^(e - 127)` for every scale byte
/// but 0xff (NaN in OCP, 2^128 in ggml), which the copy keeps as llama.cpp's converter does
/// (ggml's table also reads the code of -0 as +0).
/// `codes` holds 16 bytes per scale.
pub fn mxfp4_blocks_from_ocp(codes: &[u8], scales: &[u8]) -> Result<Vec<u8>, FormatError> {
    let expected_bytes =
        scales
            .len()
            .checked_mul(OCP_BLOCK_CODE_BYTES)
            .ok_or(FormatError::ComponentBytes {
                format: crate::PackedFormat::Fp4E2M1,
                component: "weight_packed",
                expected_bytes: usize::MAX,
                got_bytes: codes.len(),
            })?;
    if codes.len() != expected_bytes {
        return Err(FormatError::ComponentBytes {
            format: crate::PackedFormat::Fp4E2M1,
            component: "weight_packed",
            expected_bytes,
            got_bytes: codes.len(),
        });
    }
    let mut out = Vec::with_capacity(scales.len() * MXFP4_BLOCK_BYTES);
    for (block, &scale) in codes.chunks_exact(OCP_BLOCK_CODE_BYTES).zip(scales) {
        let code = |e: usize| (block[e / 2] >> (4 * (e % 2))) & 0x0f;
        out.push(scale);
        out.extend((0..FP4_GROUP_ELEMS / 2).map(|j| code(j) | (code(j + 16) << 4)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::mxfp4_blocks_from_ocp;
    use crate::{BlockFormat, ComponentBytes, FormatError, MatrixShape, PackedFormat};

    /// Every code in every nibble position and every finite scale byte decodes to the same f32
    /// through both layouts' reference decodes (the code for -0 reads +0 in ggml's table: equal
    /// values, whose products add the same).
    #[test]
    fn repacked_blocks_decode_to_the_ocp_values() {
        let scales: Vec<u8> = (0..=254u8).collect();
        let codes: Vec<u8> = (0..scales.len() * 16)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add((i / 251) as u8))
            .collect();
        let shape = MatrixShape::new(scales.len(), 32);
        let mut want = vec![0f32; scales.len() * 32];
        PackedFormat::Fp4E2M1
            .decode_matrix(
                shape,
                &[
                    ComponentBytes::new("weight_packed", &codes),
                    ComponentBytes::new("weight_scale", &scales),
                ],
                &mut want,
            )
            .unwrap();
        let blocks = mxfp4_blocks_from_ocp(&codes, &scales).unwrap();
        let mut got = vec![0f32; want.len()];
        crate::decode_blocks(BlockFormat::MXFP4, &blocks, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w && !g.is_nan(), "element {i}: {g} vs {w}");
        }
    }

    #[test]
    fn codes_not_sixteen_bytes_a_scale_are_a_typed_error() {
        assert_eq!(
            mxfp4_blocks_from_ocp(&[0; 31], &[127, 127]),
            Err(FormatError::ComponentBytes {
                format: PackedFormat::Fp4E2M1,
                component: "weight_packed",
                expected_bytes: 32,
                got_bytes: 31,
            })
        );
    }
}
