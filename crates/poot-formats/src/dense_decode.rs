//! Widening a dense floating-point tensor's stored little-endian words to f32 (for references,
//! tests and host-side reads; the engine itself keeps dense weights as stored).

use crate::scalar::{bf16_to_f32, e4m3_to_f32, e5m2_to_f32, f16_to_f32};
use crate::{DenseType, FormatError};

/// Decodes `bytes`, little-endian words of the floating-point type `dtype`, into `out` (one f32
/// per element). F64 rounds to nearest f32; every other type converts exactly. A byte length that
/// is not whole words, or an output of another length, is an error, as is a non-float `dtype`.
pub fn decode_dense(dtype: DenseType, bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let word_bytes = dtype.size_bytes();
    match dtype {
        DenseType::F64
        | DenseType::F32
        | DenseType::F16
        | DenseType::BF16
        | DenseType::F8E4M3
        | DenseType::F8E5M2 => {}
        DenseType::I64
        | DenseType::I32
        | DenseType::I16
        | DenseType::I8
        | DenseType::U64
        | DenseType::U32
        | DenseType::U16
        | DenseType::U8
        | DenseType::Bool => return Err(FormatError::NotFloat { dtype }),
    }
    if !bytes.len().is_multiple_of(word_bytes) {
        return Err(FormatError::NotWholeWords {
            dtype,
            n_bytes: bytes.len(),
        });
    }
    if bytes.len() / word_bytes != out.len() {
        return Err(FormatError::OutputLength {
            expected_elems: bytes.len() / word_bytes,
            got_elems: out.len(),
        });
    }
    let words = bytes.chunks_exact(word_bytes);
    for (word, y) in words.zip(out.iter_mut()) {
        *y = match word {
            [a] if dtype == DenseType::F8E4M3 => e4m3_to_f32(*a),
            [a] => e5m2_to_f32(*a),
            [a, b] if dtype == DenseType::F16 => f16_to_f32(u16::from_le_bytes([*a, *b])),
            [a, b] => bf16_to_f32(u16::from_le_bytes([*a, *b])),
            [a, b, c, d] => f32::from_le_bytes([*a, *b, *c, *d]),
            [a, b, c, d, e, f, g, h] => f64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h]) as f32,
            // chunks_exact(word_bytes) of a float type yields only 1, 2, 4 or 8 byte words.
            _ => return Err(FormatError::NotFloat { dtype }),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_float_type() {
        let mut out = [0f32; 2];
        decode_dense(DenseType::F32, &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_dense(DenseType::F16, &[0x00, 0x3c, 0x00, 0xc0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_dense(DenseType::BF16, &[0x80, 0x3f, 0x00, 0xc0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_dense(DenseType::F8E4M3, &[0x38, 0xc0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_dense(DenseType::F8E5M2, &[0x3c, 0xc0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        let mut one = [0f32; 1];
        decode_dense(DenseType::F64, &0.1f64.to_le_bytes(), &mut one).unwrap();
        assert_eq!(one, [0.1f32]);
    }

    #[test]
    fn refuses_ints_and_bad_lengths() {
        let mut out = [0f32; 1];
        assert_eq!(
            decode_dense(DenseType::I32, &[0; 4], &mut out),
            Err(FormatError::NotFloat {
                dtype: DenseType::I32
            })
        );
        assert_eq!(
            decode_dense(DenseType::F16, &[0; 3], &mut out),
            Err(FormatError::NotWholeWords {
                dtype: DenseType::F16,
                n_bytes: 3
            })
        );
        assert!(decode_dense(DenseType::F32, &[0; 8], &mut out).is_err());
    }
}
