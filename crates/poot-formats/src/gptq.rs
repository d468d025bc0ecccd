//! GPTQ int4 decode (layout in [`PackedFormat::Gptq`]).

use crate::components::MatrixShape;
use crate::packed::INT4_PER_WORD;
use crate::packed_decode::Bound;
use crate::scalar::f16_to_f32;
use crate::{FormatError, GptqFormat, GptqZeros, PackedFormat};

/// A GPTQ weight's components, length-checked against its shape.
pub(crate) struct GptqView<'a> {
    format: PackedFormat,
    params: GptqFormat,
    shape: MatrixShape,
    n_groups: usize,
    qweight: &'a [[u8; 4]],
    qzeros: &'a [[u8; 4]],
    scales: &'a [[u8; 2]],
    g_idx: Option<&'a [[u8; 4]]>,
}

impl<'a> GptqView<'a> {
    pub(crate) fn new(
        format: PackedFormat,
        params: GptqFormat,
        shape: MatrixShape,
        bound: &Bound<'a>,
    ) -> Result<GptqView<'a>, FormatError> {
        Ok(GptqView {
            format,
            params,
            shape,
            n_groups: params.group.n_groups(shape.k_cols),
            qweight: bound.required("qweight")?.as_chunks().0,
            qzeros: bound.required("qzeros")?.as_chunks().0,
            scales: bound.required("scales")?.as_chunks().0,
            g_idx: bound.optional("g_idx").map(|b| b.as_chunks().0),
        })
    }

    /// Decodes output row `n` into `out` (`K` values). Fails on a `g_idx` entry naming a group
    /// the checkpoint has no scales for.
    pub(crate) fn decode_row(&self, n: usize, out: &mut [f32]) -> Result<(), FormatError> {
        let n_rows = self.shape.n_rows;
        let zero_words_per_group = n_rows / INT4_PER_WORD;
        let zero_shift = 4 * (n % INT4_PER_WORD);
        for (k, y) in out.iter_mut().enumerate().take(self.shape.k_cols) {
            let word = u32::from_le_bytes(self.qweight[(k / INT4_PER_WORD) * n_rows + n]);
            let q = (word >> (4 * (k % INT4_PER_WORD))) & 0x0f;
            let group = match self.g_idx {
                None => self.params.group.group_of(k),
                Some(g_idx) => {
                    let g = i32::from_le_bytes(g_idx[k]);
                    match usize::try_from(g) {
                        Ok(g) if g < self.n_groups => g,
                        _ => {
                            return Err(FormatError::GroupIndexOutOfRange {
                                format: self.format,
                                k_col: k,
                                group: i64::from(g),
                                n_groups: self.n_groups,
                            });
                        }
                    }
                }
            };
            let zero_word =
                u32::from_le_bytes(self.qzeros[group * zero_words_per_group + n / INT4_PER_WORD]);
            let stored_zero = (zero_word >> zero_shift) & 0x0f;
            let zero = match self.params.zeros {
                GptqZeros::V1PlusOne => stored_zero + 1,
                GptqZeros::V2Exact => stored_zero,
            };
            let scale = f16_to_f32(u16::from_le_bytes(self.scales[group * n_rows + n]));
            *y = scale * (q as i32 - zero as i32) as f32;
        }
        Ok(())
    }
}
