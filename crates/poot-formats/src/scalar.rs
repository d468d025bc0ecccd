//! Decoding one stored scalar word to f32: the element types dense tensors and packed scales use.
//!
//! Every conversion here is exact: each of these types is a subset of f32's values (E8M0's 2^-127
//! is an f32 subnormal), so there is no rounding to choose. NaN encodings decode to a quiet f32
//! NaN carrying the sign; which NaN payload is not part of any format's meaning.

/// An IEEE binary16 word (`F16`) as f32.
pub fn f16_to_f32(word: u16) -> f32 {
    half::f16::from_bits(word).to_f32()
}

/// A bfloat16 word (`BF16`, the top half of an f32) as f32.
pub fn bf16_to_f32(word: u16) -> f32 {
    half::bf16::from_bits(word).to_f32()
}

/// An OCP FP8 E4M3 byte (`F8_E4M3`, the "fn" variant: bias 7, no infinities, `S.1111.111` is NaN,
/// largest finite 448) as f32.
pub fn e4m3_to_f32(byte: u8) -> f32 {
    let sign_bit = u32::from(byte & 0x80) << 24;
    let exp = u32::from((byte >> 3) & 0x0f);
    let man = u32::from(byte & 0x07);
    if exp == 0x0f && man == 0x07 {
        return f32::from_bits(sign_bit | 0x7fc0_0000);
    }
    if exp == 0 {
        // Subnormal: man * 2^-9, exact in f32.
        let magnitude = man as f32 * (1.0 / 512.0);
        return f32::from_bits(sign_bit | magnitude.to_bits());
    }
    f32::from_bits(sign_bit | ((exp + 127 - 7) << 23) | (man << 20))
}

/// An OCP FP8 E5M2 byte (`F8_E5M2`: bias 15, with infinities and NaNs like binary16) as f32.
/// E5M2 is binary16 with the low 8 mantissa bits dropped, so the byte is the top half of an f16.
pub fn e5m2_to_f32(byte: u8) -> f32 {
    f16_to_f32(u16::from(byte) << 8)
}

/// An OCP E8M0 scale byte (an unsigned power of two, 2^(e - 127); 0xff is NaN) as f32.
pub fn e8m0_to_f32(byte: u8) -> f32 {
    match byte {
        0xff => f32::NAN,
        // 2^-127 is below f32's normal range: the subnormal with only mantissa bit 22 set.
        0 => f32::from_bits(0x0040_0000),
        e => f32::from_bits(u32::from(e) << 23),
    }
}

/// An OCP FP4 E2M1 code (the low 4 bits of `code`: sign, 2 exponent bits with bias 1, 1 mantissa
/// bit; every code is finite) as f32.
pub fn e2m1_to_f32(code: u8) -> f32 {
    const MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let magnitude = MAGNITUDES[usize::from(code & 0x07)];
    if code & 0x08 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_landmarks() {
        assert_eq!(e4m3_to_f32(0x00).to_bits(), 0);
        assert_eq!(e4m3_to_f32(0x80).to_bits(), 0x8000_0000);
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0xfe), -448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn e5m2_landmarks() {
        assert_eq!(e5m2_to_f32(0x3c), 1.0);
        assert_eq!(e5m2_to_f32(0x7b), 57344.0);
        assert_eq!(e5m2_to_f32(0x7c), f32::INFINITY);
        assert_eq!(e5m2_to_f32(0xfc), f32::NEG_INFINITY);
        assert!(e5m2_to_f32(0x7d).is_nan());
        assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
    }

    #[test]
    fn e8m0_and_e2m1_landmarks() {
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32(254), 2f32.powi(127));
        assert!(e8m0_to_f32(255).is_nan());
        assert_eq!(e2m1_to_f32(0x07), 6.0);
        assert_eq!(e2m1_to_f32(0x0f), -6.0);
        assert_eq!(e2m1_to_f32(0x08).to_bits(), 0x8000_0000);
        assert_eq!(e2m1_to_f32(0x13), 1.5, "only the low 4 bits are the code");
    }
}
