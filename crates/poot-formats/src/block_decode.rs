//! CPU reference decode of GGUF block formats to f32, bit-identical to ggml's
//! `dequantize_row_*` (ggml-quants.c): each value is computed in f32 with ggml's operations in
//! ggml's order, multiply and add/subtract rounded separately (no fused multiply-add; a ggml build
//! that contracts them can differ in the last bit).

use crate::components::MatrixShape;
use crate::error::MatrixDim;
use crate::iq_tables::{
    IQ2XS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS, KVALUES_IQ4NL, KVALUES_MXFP4,
};
use crate::scalar::f16_to_f32;
use crate::{BlockFormat, FormatError, PackedFormat};

/// Decodes whole blocks of `format` from `bytes` into `out`, `block_elems` values per block in
/// element order. `bytes` must be a whole number of blocks and `out` exactly as long as they
/// decode to.
pub fn decode_blocks(
    format: BlockFormat,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), FormatError> {
    let block_bytes = format.block_bytes();
    if !bytes.len().is_multiple_of(block_bytes) {
        return Err(FormatError::NotWholeBlocks {
            format,
            n_bytes: bytes.len(),
            block_bytes,
        });
    }
    let expected_elems = bytes.len() / block_bytes * format.block_elems();
    if out.len() != expected_elems {
        return Err(FormatError::OutputLength {
            expected_elems,
            got_elems: out.len(),
        });
    }
    match format {
        BlockFormat::Q4_0 => each_block(bytes, out, q4_0),
        BlockFormat::Q4_1 => each_block(bytes, out, q4_1),
        BlockFormat::Q5_0 => each_block(bytes, out, q5_0),
        BlockFormat::Q5_1 => each_block(bytes, out, q5_1),
        BlockFormat::Q8_0 => each_block(bytes, out, q8_0),
        BlockFormat::Q2_K => each_block(bytes, out, q2_k),
        BlockFormat::Q3_K => each_block(bytes, out, q3_k),
        BlockFormat::Q4_K => each_block(bytes, out, q4_k),
        BlockFormat::Q5_K => each_block(bytes, out, q5_k),
        BlockFormat::Q6_K => each_block(bytes, out, q6_k),
        BlockFormat::IQ2_XS => each_block(bytes, out, iq2_xs),
        BlockFormat::IQ3_XXS => each_block(bytes, out, iq3_xxs),
        BlockFormat::IQ3_S => each_block(bytes, out, iq3_s),
        BlockFormat::IQ4_NL => each_block(bytes, out, iq4_nl),
        BlockFormat::IQ4_XS => each_block(bytes, out, iq4_xs),
        BlockFormat::MXFP4 => each_block(bytes, out, mxfp4),
    }
    Ok(())
}

/// Decodes row `row` of a GGUF tensor of logical `shape` (`K` a multiple of the block size; the
/// row is `K / block_elems` whole blocks) stored in `bytes`, into `out` (`K` values).
pub fn decode_block_row(
    format: BlockFormat,
    shape: MatrixShape,
    bytes: &[u8],
    row: usize,
    out: &mut [f32],
) -> Result<(), FormatError> {
    let packed = PackedFormat::Block(format);
    if !shape.k_cols.is_multiple_of(format.block_elems()) {
        return Err(FormatError::ShapeNotDivisible {
            format: packed,
            dim: MatrixDim::Cols,
            elems: shape.k_cols,
            multiple: format.block_elems(),
        });
    }
    let overflow = FormatError::SizeOverflow {
        format: packed,
        n_rows: shape.n_rows,
        k_cols: shape.k_cols,
    };
    let row_bytes = format.row_bytes(shape.k_cols).ok_or(overflow.clone())?;
    let expected_bytes = row_bytes.checked_mul(shape.n_rows).ok_or(overflow)?;
    if bytes.len() != expected_bytes {
        return Err(FormatError::ComponentBytes {
            format: packed,
            component: "weight",
            expected_bytes,
            got_bytes: bytes.len(),
        });
    }
    if row >= shape.n_rows {
        return Err(FormatError::RowOutOfRange {
            row,
            n_rows: shape.n_rows,
        });
    }
    let start = row * row_bytes;
    let row_slice = bytes
        .get(start..start + row_bytes)
        .ok_or(FormatError::RowOutOfRange {
            row,
            n_rows: shape.n_rows,
        })?;
    decode_blocks(format, row_slice, out)
}

/// Runs `decode` over each block; the caller has checked that `bytes` is whole `BB`-byte blocks
/// and `out` holds `BE` values for each.
fn each_block<const BB: usize, const BE: usize>(
    bytes: &[u8],
    out: &mut [f32],
    decode: fn(&[u8; BB], &mut [f32; BE]),
) {
    let (blocks, _) = bytes.as_chunks::<BB>();
    let (values, _) = out.as_chunks_mut::<BE>();
    for (block, y) in blocks.iter().zip(values.iter_mut()) {
        decode(block, y);
    }
}

fn f16_at<const N: usize>(block: &[u8; N], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

fn q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let x0 = i32::from(b[2 + j] & 0x0f) - 8;
        let x1 = i32::from(b[2 + j] >> 4) - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

fn q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    for j in 0..16 {
        let x0 = b[4 + j] & 0x0f;
        let x1 = b[4 + j] >> 4;
        y[j] = f32::from(x0) * d + m;
        y[j + 16] = f32::from(x1) * d + m;
    }
}

fn q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let xh_0 = ((qh >> j) << 4) & 0x10;
        let xh_1 = (qh >> (j + 12)) & 0x10;
        let x0 = (u32::from(b[6 + j] & 0x0f) | xh_0) as i32 - 16;
        let x1 = (u32::from(b[6 + j] >> 4) | xh_1) as i32 - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

fn q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for j in 0..16 {
        let xh_0 = ((qh >> j) << 4) & 0x10;
        let xh_1 = (qh >> (j + 12)) & 0x10;
        let x0 = u32::from(b[8 + j] & 0x0f) | xh_0;
        let x1 = u32::from(b[8 + j] >> 4) | xh_1;
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

fn q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = f32::from(b[2 + j] as i8) * d;
    }
}

fn q2_k(b: &[u8; 84], y: &mut [f32; 256]) {
    let d = f16_at(b, 80);
    let min = f16_at(b, 82);
    let mut is = 0;
    let mut out = 0;
    for n in 0..2 {
        let q = 16 + 32 * n;
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let sc = b[is];
                is += 1;
                let dl = d * f32::from(sc & 0x0f);
                let ml = min * f32::from(sc >> 4);
                for l in 0..16 {
                    y[out] = dl * f32::from((b[q + l + 16 * half] >> shift) & 3) - ml;
                    out += 1;
                }
            }
        }
    }
}

fn q3_k(b: &[u8; 110], y: &mut [f32; 256]) {
    const HMASK: usize = 0;
    const QS: usize = 32;
    const SCALES: usize = 96;
    let d_all = f16_at(b, 108);
    // Sub-block scale j: low 4 bits from byte j (j < 8) or the high nibble of byte j - 8, high 2
    // bits from byte 8 + j % 4 at bit 2 * (j / 4); then minus 32.
    let scale = |j: usize| -> i32 {
        let low = if j < 8 {
            b[SCALES + j] & 0x0f
        } else {
            b[SCALES + j - 8] >> 4
        };
        let high = (b[SCALES + 8 + j % 4] >> (2 * (j / 4))) & 3;
        i32::from(low | (high << 4)) - 32
    };
    let mut is = 0;
    let mut out = 0;
    let mut m: u8 = 1;
    for n in 0..2 {
        let q = QS + 32 * n;
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let dl = d_all * scale(is) as f32;
                is += 1;
                for l in 0..16 {
                    let at = l + 16 * half;
                    let low = i32::from((b[q + at] >> shift) & 3);
                    let offset = if b[HMASK + at] & m != 0 { 0 } else { 4 };
                    y[out] = dl * (low - offset) as f32;
                    out += 1;
                }
            }
            m = m.wrapping_shl(1);
        }
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` of a Q4_K/Q5_K block.
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn k_scales<const N: usize>(b: &[u8; N]) -> [u8; 12] {
    let mut scales = [0u8; 12];
    scales.copy_from_slice(&b[4..16]);
    scales
}

fn q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = k_scales(b);
    for chunk in 0..4 {
        let (sc, m) = scale_min_k4(2 * chunk, &scales);
        let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
        let (sc, m) = scale_min_k4(2 * chunk + 1, &scales);
        let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
        let q = 16 + 32 * chunk;
        for l in 0..32 {
            y[64 * chunk + l] = d1 * f32::from(b[q + l] & 0x0f) - m1;
            y[64 * chunk + 32 + l] = d2 * f32::from(b[q + l] >> 4) - m2;
        }
    }
}

fn q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    const QH: usize = 16;
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = k_scales(b);
    for chunk in 0..4 {
        let (sc, m) = scale_min_k4(2 * chunk, &scales);
        let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
        let (sc, m) = scale_min_k4(2 * chunk + 1, &scales);
        let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
        let u1: u8 = 1 << (2 * chunk);
        let u2: u8 = 2 << (2 * chunk);
        let ql = 48 + 32 * chunk;
        for l in 0..32 {
            let h1 = if b[QH + l] & u1 != 0 { 16 } else { 0 };
            let h2 = if b[QH + l] & u2 != 0 { 16 } else { 0 };
            y[64 * chunk + l] = d1 * f32::from((b[ql + l] & 0x0f) + h1) - m1;
            y[64 * chunk + 32 + l] = d2 * f32::from((b[ql + l] >> 4) + h2) - m2;
        }
    }
}

fn q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = f16_at(b, 208);
    for n in 0..2 {
        let ql = 64 * n;
        let qh = 128 + 32 * n;
        let sc = |i: usize| f32::from(b[192 + 8 * n + i] as i8);
        for l in 0..32 {
            let is = l / 16;
            let h = b[qh + l];
            let q1 = i32::from((b[ql + l] & 0x0f) | ((h & 3) << 4)) - 32;
            let q2 = i32::from((b[ql + l + 32] & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((b[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((b[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
            y[128 * n + l] = d * sc(is) * q1 as f32;
            y[128 * n + l + 32] = d * sc(is + 2) * q2 as f32;
            y[128 * n + l + 64] = d * sc(is + 4) * q3 as f32;
            y[128 * n + l + 96] = d * sc(is + 6) * q4 as f32;
        }
    }
}

fn iq2_xs(b: &[u8; 74], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    for ib32 in 0..8 {
        let s = b[66 + ib32];
        let db = [
            d * (0.5 + f32::from(s & 0x0f)) * 0.25,
            d * (0.5 + f32::from(s >> 4)) * 0.25,
        ];
        for l in 0..4 {
            let at = 2 + 2 * (4 * ib32 + l);
            let code = u16::from_le_bytes([b[at], b[at + 1]]);
            let grid = &IQ2XS_GRID[usize::from(code & 511)];
            let signs = KSIGNS_IQ2XS[usize::from(code >> 9)];
            for j in 0..8 {
                y[32 * ib32 + 8 * l + j] = db[l / 2] * f32::from(grid[j]) * sign(signs, j);
            }
        }
    }
}

fn iq3_xxs(b: &[u8; 98], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    for ib32 in 0..8 {
        let at = 66 + 4 * ib32;
        let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let grid1 = &IQ3XXS_GRID[usize::from(b[2 + 8 * ib32 + 2 * l])];
            let grid2 = &IQ3XXS_GRID[usize::from(b[2 + 8 * ib32 + 2 * l + 1])];
            for j in 0..4 {
                y[32 * ib32 + 8 * l + j] = db * f32::from(grid1[j]) * sign(signs, j);
                y[32 * ib32 + 8 * l + j + 4] = db * f32::from(grid2[j]) * sign(signs, j + 4);
            }
        }
    }
}

fn iq3_s(b: &[u8; 110], y: &mut [f32; 256]) {
    const QS: usize = 2;
    const QH: usize = 66;
    const SIGNS: usize = 74;
    const SCALES: usize = 106;
    let d = f16_at(b, 0);
    for ib32 in 0..8 {
        let sc = b[SCALES + ib32 / 2];
        let nibble = if ib32 % 2 == 0 { sc & 0x0f } else { sc >> 4 };
        let db = d * (1 + 2 * i32::from(nibble)) as f32;
        let qh = u16::from(b[QH + ib32]);
        for l in 0..4 {
            let index1 = u16::from(b[QS + 8 * ib32 + 2 * l]) | ((qh << (8 - 2 * l)) & 256);
            let index2 = u16::from(b[QS + 8 * ib32 + 2 * l + 1]) | ((qh << (7 - 2 * l)) & 256);
            let grid1 = &IQ3S_GRID[usize::from(index1)];
            let grid2 = &IQ3S_GRID[usize::from(index2)];
            let signs = b[SIGNS + 4 * ib32 + l];
            for j in 0..4 {
                y[32 * ib32 + 8 * l + j] = db * f32::from(grid1[j]) * sign(signs, j);
                y[32 * ib32 + 8 * l + j + 4] = db * f32::from(grid2[j]) * sign(signs, j + 4);
            }
        }
    }
}

fn iq4_nl(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(b[2 + j] & 0x0f)]);
        y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(b[2 + j] >> 4)]);
    }
}

fn iq4_xs(b: &[u8; 136], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for ib in 0..8 {
        let low = i32::from((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f);
        let high = i32::from((scales_h >> (2 * ib)) & 3);
        let dl = d * ((low | (high << 4)) - 32) as f32;
        for j in 0..16 {
            let q = b[8 + 16 * ib + j];
            y[32 * ib + j] = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
            y[32 * ib + j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    }
}

/// ggml's `GGML_E8M0_TO_FP32_HALF`: half of 2^(e - 127), the scale of MXFP4's doubled levels.
fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

fn mxfp4(b: &[u8; 17], y: &mut [f32; 32]) {
    let d = e8m0_to_f32_half(b[0]);
    for j in 0..16 {
        y[j] = f32::from(KVALUES_MXFP4[usize::from(b[1 + j] & 0x0f)]) * d;
        y[j + 16] = f32::from(KVALUES_MXFP4[usize::from(b[1 + j] >> 4)]) * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_partial_blocks_and_wrong_outputs() {
        let mut out = vec![0f32; 32];
        assert_eq!(
            decode_blocks(BlockFormat::Q4_0, &[0; 17], &mut out),
            Err(FormatError::NotWholeBlocks {
                format: BlockFormat::Q4_0,
                n_bytes: 17,
                block_bytes: 18
            })
        );
        assert_eq!(
            decode_blocks(BlockFormat::Q4_0, &[0; 36], &mut out),
            Err(FormatError::OutputLength {
                expected_elems: 64,
                got_elems: 32
            })
        );
        decode_blocks(BlockFormat::Q4_0, &[], &mut []).expect("zero blocks decode to nothing");
    }

    #[test]
    fn every_format_decodes_one_block_of_zeros() {
        for format in BlockFormat::ALL {
            let bytes = vec![0u8; format.block_bytes()];
            let mut out = vec![f32::NAN; format.block_elems()];
            decode_blocks(format, &bytes, &mut out).expect("one whole block");
            assert!(
                out.iter().all(|v| v.is_finite()),
                "{format:?} left a value unwritten"
            );
        }
    }

    #[test]
    fn q8_0_by_hand() {
        let mut block = [0u8; 34];
        block[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        block[2] = 4;
        block[33] = 0xfe; // -2
        let mut out = [0f32; 32];
        decode_blocks(BlockFormat::Q8_0, &block, &mut out).expect("one block");
        assert_eq!((out[0], out[1], out[31]), (2.0, 0.0, -1.0));
    }

    #[test]
    fn row_decode_checks_shape() {
        let bytes = vec![0u8; 2 * 36];
        let shape = MatrixShape::new(2, 64);
        let mut out = vec![0f32; 64];
        decode_block_row(BlockFormat::Q4_0, shape, &bytes, 1, &mut out).expect("row 1 of 2");
        assert_eq!(
            decode_block_row(BlockFormat::Q4_0, shape, &bytes, 2, &mut out),
            Err(FormatError::RowOutOfRange { row: 2, n_rows: 2 })
        );
        assert!(matches!(
            decode_block_row(
                BlockFormat::Q4_0,
                MatrixShape::new(2, 48),
                &bytes,
                0,
                &mut out
            ),
            Err(FormatError::ShapeNotDivisible { .. })
        ));
        assert!(matches!(
            decode_block_row(
                BlockFormat::Q4_0,
                MatrixShape::new(3, 64),
                &bytes,
                0,
                &mut out
            ),
            Err(FormatError::ComponentBytes {
                expected_bytes: 108,
                got_bytes: 72,
                ..
            })
        ));
    }
}
