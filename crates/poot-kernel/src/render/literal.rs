//! f32 constants in rendered source, exact in every compiler.
//!
//! A decimal literal is only as exact as the compiler's decimal-to-float conversion (and some
//! convert through f64, rounding twice). So a constant renders as a decimal only when that
//! decimal's value *is* the f32 (1.0, 0.5, -2.25, 65504.0: no rounding happens at all); every
//! other value, infinities, NaNs, subnormals and -0.0 included, renders as its bit pattern with
//! the shortest decimal that rounds to it in a comment.

/// How to spell one f32 constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum F32Spelling {
    /// A decimal whose exact value is the constant, without suffix (`1.0`, `-0.5`).
    Decimal(String),
    /// The constant's bits, and Rust's shortest decimal (`0.1`, `inf`, `NaN`) for a comment.
    Bits(u32, String),
}

pub(crate) fn spell_f32(x: f32) -> F32Spelling {
    if x.to_bits() == 0 {
        return F32Spelling::Decimal("0.0".to_string());
    }
    let shortest = format!("{x:?}");
    if x.is_normal() && is_exact(x.abs(), shortest.trim_start_matches('-')) {
        F32Spelling::Decimal(shortest)
    } else {
        F32Spelling::Bits(x.to_bits(), shortest)
    }
}

/// Whether the decimal `s` (digits, an optional `.`, an optional `e` exponent) equals the
/// positive normal `x` exactly.
fn is_exact(x: f32, s: &str) -> bool {
    let (mantissa, exp10) = match s.split_once('e') {
        Some((m, e)) => match e.parse::<i32>() {
            Ok(e) => (m, e),
            Err(_) => return false,
        },
        None => (s, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let Ok(digits) = format!("{int_part}{frac_part}").parse::<u128>() else {
        return false;
    };
    let Ok(frac_len) = i32::try_from(frac_part.len()) else {
        return false;
    };
    let exp10 = exp10 - frac_len;
    // x = m2 * 2^exp2 with a 24-bit m2.
    let bits = x.to_bits();
    let m2 = u128::from((bits & 0x007f_ffff) | 0x0080_0000);
    let exp2 = ((bits >> 23) & 0xff) as i32 - 150;
    // digits * 10^exp10 == m2 * 2^exp2, with both sides scaled to integers.
    let scale = |v: u128, pow10: i32, pow2: i32| -> Option<u128> {
        let v = v.checked_mul(10u128.checked_pow(u32::try_from(pow10).ok()?)?)?;
        v.checked_mul(1u128.checked_shl(u32::try_from(pow2).ok()?)?)
    };
    let lhs = scale(digits, exp10.max(0), (-exp2).max(0));
    let rhs = scale(m2, (-exp10).max(0), exp2.max(0));
    matches!((lhs, rhs), (Some(l), Some(r)) if l == r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_values_are_decimal_the_rest_bits() {
        assert_eq!(spell_f32(1.0), F32Spelling::Decimal("1.0".into()));
        assert_eq!(spell_f32(-0.5), F32Spelling::Decimal("-0.5".into()));
        assert_eq!(spell_f32(65504.0), F32Spelling::Decimal("65504.0".into()));
        assert_eq!(
            spell_f32(0.0009765625),
            F32Spelling::Decimal("0.0009765625".into())
        );
        assert_eq!(spell_f32(0.1), F32Spelling::Bits(0x3dcc_cccd, "0.1".into()));
        assert_eq!(
            spell_f32(1e-5),
            F32Spelling::Bits(1e-5f32.to_bits(), "1e-5".into())
        );
        assert_eq!(
            spell_f32(-0.0),
            F32Spelling::Bits(0x8000_0000, "-0.0".into())
        );
        assert_eq!(
            spell_f32(f32::INFINITY),
            F32Spelling::Bits(0x7f80_0000, "inf".into())
        );
        assert_eq!(
            spell_f32(f32::from_bits(1)),
            F32Spelling::Bits(1, "1e-45".into())
        );
        assert!(matches!(
            spell_f32(f32::NAN),
            F32Spelling::Bits(0x7fc0_0000, _)
        ));
        assert!(matches!(spell_f32(f32::MAX), F32Spelling::Bits(_, _)));
        assert_eq!(
            spell_f32(16777216.0),
            F32Spelling::Decimal("16777216.0".into())
        );
    }

    #[test]
    fn every_decimal_spelling_is_the_value() {
        let mut b = 0u32;
        while b < 0xff80_0000 {
            let x = f32::from_bits(b);
            if let F32Spelling::Decimal(s) = spell_f32(x) {
                assert_eq!(s.parse::<f64>().ok(), Some(f64::from(x)), "{s}");
            }
            b += 0x0000_1001;
        }
    }
}
