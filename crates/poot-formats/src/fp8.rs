//! FP8 E4M3 decode with per-channel, per-tensor or 128x128 block scales (layout in
//! [`PackedFormat::Fp8`]).

use crate::components::MatrixShape;
use crate::packed::FP8_BLOCK_ELEMS;
use crate::packed_decode::Bound;
use crate::scalar::{bf16_to_f32, e4m3_to_f32};
use crate::{FormatError, Fp8Format, Fp8Scaling, ScaleType};

/// An FP8 weight's components, length-checked against its shape.
pub(crate) struct Fp8View<'a> {
    params: Fp8Format,
    shape: MatrixShape,
    weight: &'a [u8],
    scales: &'a [u8],
}

impl<'a> Fp8View<'a> {
    pub(crate) fn new(
        params: Fp8Format,
        shape: MatrixShape,
        bound: &Bound<'a>,
    ) -> Result<Fp8View<'a>, FormatError> {
        let scale_name = match params.scaling {
            Fp8Scaling::PerChannel | Fp8Scaling::PerTensor => "weight_scale",
            Fp8Scaling::Block128 => "weight_scale_inv",
        };
        Ok(Fp8View {
            params,
            shape,
            weight: bound.required("weight")?,
            scales: bound.required(scale_name)?,
        })
    }

    fn scale(&self, index: usize) -> f32 {
        match self.params.scale_type {
            ScaleType::BF16 => bf16_to_f32(u16::from_le_bytes([
                self.scales[2 * index],
                self.scales[2 * index + 1],
            ])),
            ScaleType::F32 => {
                let at = 4 * index;
                f32::from_le_bytes([
                    self.scales[at],
                    self.scales[at + 1],
                    self.scales[at + 2],
                    self.scales[at + 3],
                ])
            }
        }
    }

    /// Decodes output row `n` into `out` (`K` values): `f32(weight) * scale`, one f32 multiply.
    pub(crate) fn decode_row(&self, n: usize, out: &mut [f32]) {
        let k_cols = self.shape.k_cols;
        let row = &self.weight[n * k_cols..(n + 1) * k_cols];
        match self.params.scaling {
            Fp8Scaling::PerChannel | Fp8Scaling::PerTensor => {
                let scale = self.scale(match self.params.scaling {
                    Fp8Scaling::PerTensor => 0,
                    _ => n,
                });
                for (y, &w) in out.iter_mut().zip(row) {
                    *y = e4m3_to_f32(w) * scale;
                }
            }
            Fp8Scaling::Block128 => {
                let tiles_per_row = k_cols.div_ceil(FP8_BLOCK_ELEMS);
                let tile_row = n / FP8_BLOCK_ELEMS;
                for (k, (y, &w)) in out.iter_mut().zip(row).enumerate() {
                    *y =
                        e4m3_to_f32(w) * self.scale(tile_row * tiles_per_row + k / FP8_BLOCK_ELEMS);
                }
            }
        }
    }
}
