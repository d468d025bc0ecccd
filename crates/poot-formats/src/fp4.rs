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
