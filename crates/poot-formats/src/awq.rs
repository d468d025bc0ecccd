//! AWQ int4 decode (layout in [`PackedFormat::Awq`]).

use crate::components::MatrixShape;
use crate::packed::{AWQ_NIBBLE_OF_ROW, INT4_PER_WORD};
use crate::packed_decode::Bound;
use crate::scalar::f16_to_f32;
use crate::{AwqFormat, FormatError};

/// An AWQ weight's components, length-checked against its shape.
pub(crate) struct AwqView<'a> {
    params: AwqFormat,
    shape: MatrixShape,
    qweight: &'a [[u8; 4]],
    qzeros: &'a [[u8; 4]],
    scales: &'a [[u8; 2]],
}

impl<'a> AwqView<'a> {
    pub(crate) fn new(
        params: AwqFormat,
        shape: MatrixShape,
        bound: &Bound<'a>,
    ) -> Result<AwqView<'a>, FormatError> {
        Ok(AwqView {
            params,
            shape,
            qweight: bound.required("qweight")?.as_chunks().0,
            qzeros: bound.required("qzeros")?.as_chunks().0,
            scales: bound.required("scales")?.as_chunks().0,
        })
    }

    /// Decodes output row `n` into `out` (`K` values).
    pub(crate) fn decode_row(&self, n: usize, out: &mut [f32]) {
        let n_rows = self.shape.n_rows;
        let words_per_row = n_rows / INT4_PER_WORD;
        let shift = 4 * AWQ_NIBBLE_OF_ROW[n % INT4_PER_WORD];
        let word_col = n / INT4_PER_WORD;
        for (k, y) in out.iter_mut().enumerate().take(self.shape.k_cols) {
            let q =
                (u32::from_le_bytes(self.qweight[k * words_per_row + word_col]) >> shift) & 0x0f;
            let group = self.params.group.group_of(k);
            let zero =
                (u32::from_le_bytes(self.qzeros[group * words_per_row + word_col]) >> shift) & 0x0f;
            let scale = f16_to_f32(u16::from_le_bytes(self.scales[group * n_rows + n]));
            *y = scale * (q as i32 - zero as i32) as f32;
        }
    }
}
