//! The helper functions a WGSL rendering may call, each emitted only when used.
//!
//! WGSL leaves more open than the description allows: float-to-int conversion of NaN, the
//! rounding of integer-to-float conversion, `max`/`min` with NaN or signed zeros, `pow` of a
//! negative base, `tanh` of a large argument; it has no `erf`; and an implementation "may
//! assume" NaN and infinity never occur, so NaN tests here look at bits, never at `x != x`.
//! The bit-level algorithms are the same as the CUDA library's ([`super::cuda_lib`]).
//!
//! Storage buffers cannot be passed to WGSL functions, so the sub-word loads are one helper per
//! buffer, reading the buffer's module-scope variable.

/// A WGSL helper. Declaration order is emission order; a helper's dependencies come before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WgslLib {
    /// Identity functions that make a constant operand a run-time value (see `wgsl.rs`).
    RtF32,
    RtI32,
    RtU32,
    RtBool,
    F16ToF32,
    /// Byte loads from parameter `n`.
    LoadByte(u32),
    /// f16 half loads from parameter `n`.
    LoadF16(u32),
    /// bf16 half loads from parameter `n`.
    LoadBf16(u32),
    RoundF16,
    RoundBf16,
    MaxF32,
    MinF32,
    F32ToI32,
    F32ToU32,
    F32ToBool,
    U32ToF32,
    I32ToF32,
    DivI32,
    RemI32,
    DivU32,
    RemU32,
    Erf,
    Pow,
    Tanh,
}

impl WgslLib {
    /// Helpers this one calls.
    pub(crate) fn deps(self) -> &'static [WgslLib] {
        match self {
            WgslLib::LoadF16(_) => &[WgslLib::F16ToF32],
            WgslLib::I32ToF32 => &[WgslLib::U32ToF32],
            WgslLib::RtF32
            | WgslLib::RtI32
            | WgslLib::RtU32
            | WgslLib::RtBool
            | WgslLib::F16ToF32
            | WgslLib::LoadByte(_)
            | WgslLib::LoadBf16(_)
            | WgslLib::RoundF16
            | WgslLib::RoundBf16
            | WgslLib::MaxF32
            | WgslLib::MinF32
            | WgslLib::F32ToI32
            | WgslLib::F32ToU32
            | WgslLib::F32ToBool
            | WgslLib::U32ToF32
            | WgslLib::DivI32
            | WgslLib::RemI32
            | WgslLib::DivU32
            | WgslLib::RemU32
            | WgslLib::Erf
            | WgslLib::Pow
            | WgslLib::Tanh => &[],
        }
    }

    /// The helper's function name; `params` are the kernel's parameter identifiers.
    pub(crate) fn name(self, params: &[String]) -> String {
        let param = |n: u32| {
            params
                .get(n as usize)
                .map_or("", String::as_str)
                .to_string()
        };
        match self {
            WgslLib::RtF32 => "poot_rt_f32".to_string(),
            WgslLib::RtI32 => "poot_rt_i32".to_string(),
            WgslLib::RtU32 => "poot_rt_u32".to_string(),
            WgslLib::RtBool => "poot_rt_bool".to_string(),
            WgslLib::F16ToF32 => "poot_f16_to_f32".to_string(),
            WgslLib::LoadByte(n) => format!("poot_load_byte_{}", param(n)),
            WgslLib::LoadF16(n) => format!("poot_load_f16_{}", param(n)),
            WgslLib::LoadBf16(n) => format!("poot_load_bf16_{}", param(n)),
            WgslLib::RoundF16 => "poot_round_f16".to_string(),
            WgslLib::RoundBf16 => "poot_round_bf16".to_string(),
            WgslLib::MaxF32 => "poot_max_f32".to_string(),
            WgslLib::MinF32 => "poot_min_f32".to_string(),
            WgslLib::F32ToI32 => "poot_f32_to_i32".to_string(),
            WgslLib::F32ToU32 => "poot_f32_to_u32".to_string(),
            WgslLib::F32ToBool => "poot_f32_to_bool".to_string(),
            WgslLib::U32ToF32 => "poot_u32_to_f32".to_string(),
            WgslLib::I32ToF32 => "poot_i32_to_f32".to_string(),
            WgslLib::DivI32 => "poot_div_i32".to_string(),
            WgslLib::RemI32 => "poot_rem_i32".to_string(),
            WgslLib::DivU32 => "poot_div_u32".to_string(),
            WgslLib::RemU32 => "poot_rem_u32".to_string(),
            WgslLib::Erf => "poot_erf".to_string(),
            WgslLib::Pow => "poot_pow".to_string(),
            WgslLib::Tanh => "poot_tanh".to_string(),
        }
    }

    /// The helper's definition, ending in a newline; `params` are the kernel's parameter
    /// identifiers.
    pub(crate) fn source(self, params: &[String]) -> String {
        let name = self.name(params);
        let param = |n: u32| {
            params
                .get(n as usize)
                .map_or("", String::as_str)
                .to_string()
        };
        match self {
            WgslLib::RtF32 => RT.replace("$T", "f32"),
            WgslLib::RtI32 => RT.replace("$T", "i32"),
            WgslLib::RtU32 => RT.replace("$T", "u32"),
            WgslLib::RtBool => RT.replace("$T", "bool"),
            WgslLib::F16ToF32 => F16_TO_F32.to_string(),
            WgslLib::LoadByte(n) => LOAD_BYTE.replace("$NAME", &name).replace("$BUF", &param(n)),
            WgslLib::LoadF16(n) => LOAD_F16.replace("$NAME", &name).replace("$BUF", &param(n)),
            WgslLib::LoadBf16(n) => LOAD_BF16.replace("$NAME", &name).replace("$BUF", &param(n)),
            WgslLib::RoundF16 => ROUND_F16.to_string(),
            WgslLib::RoundBf16 => ROUND_BF16.to_string(),
            WgslLib::MaxF32 => MAX_F32.to_string(),
            WgslLib::MinF32 => MIN_F32.to_string(),
            WgslLib::F32ToI32 => F32_TO_I32.to_string(),
            WgslLib::F32ToU32 => F32_TO_U32.to_string(),
            WgslLib::F32ToBool => F32_TO_BOOL.to_string(),
            WgslLib::U32ToF32 => U32_TO_F32.to_string(),
            WgslLib::I32ToF32 => I32_TO_F32.to_string(),
            WgslLib::DivI32 => DIV_I32.to_string(),
            WgslLib::RemI32 => REM_I32.to_string(),
            WgslLib::DivU32 => DIV_U32.to_string(),
            WgslLib::RemU32 => REM_U32.to_string(),
            WgslLib::Erf => ERF.to_string(),
            WgslLib::Pow => POW.to_string(),
            WgslLib::Tanh => TANH.to_string(),
        }
    }
}

const RT: &str = "\
// x itself, as a run-time value: keeps naga from folding (and rejecting) constant operations.
fn poot_rt_$T(x: $T) -> $T {
    return x;
}
";

const F16_TO_F32: &str = "\
// IEEE half bits to f32, exactly; a NaN keeps its payload and gets the quiet bit.
fn poot_f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0x1fu) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u) | select(0u, 0x400000u, m != 0u));
    }
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact and normal in f32.
        return bitcast<f32>(s | bitcast<u32>(f32(m) * bitcast<f32>(0x33800000u)));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
";

const LOAD_BYTE: &str = "\
// Byte b of $BUF, little-endian u32 words.
fn $NAME(b: u32) -> u32 {
    return ($BUF[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}
";

const LOAD_F16: &str = "\
// Half i of $BUF (the low half of word i >> 1 when i is even), as f16.
fn $NAME(i: u32) -> f32 {
    return poot_f16_to_f32(($BUF[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu);
}
";

const LOAD_BF16: &str = "\
// Half i of $BUF (the low half of word i >> 1 when i is even), as bf16.
fn $NAME(i: u32) -> f32 {
    return bitcast<f32>((($BUF[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu) << 16u);
}
";

const ROUND_F16: &str = "\
// x rounded to the nearest f16 value, ties to even, as f32; overflow gives inf, NaN stays NaN.
fn poot_round_f16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let s = b & 0x80000000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return bitcast<f32>((b | 0x400000u) & 0xffffe000u);
    }
    if (a >= 0x477ff000u) {
        return bitcast<f32>(s | 0x7f800000u);
    }
    if (a >= 0x38800000u) {
        // f16 normal range: keep 10 mantissa bits.
        return bitcast<f32>(s | ((a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u));
    }
    if (a < 0x33000000u) {
        return bitcast<f32>(s);
    }
    // f16 subnormal range: round to a multiple q of 2^-24.
    let sh = 126u - (a >> 23u);
    let m = (a & 0x7fffffu) | 0x800000u;
    var q = m >> sh;
    let rm = m & ((1u << sh) - 1u);
    let hw = 1u << (sh - 1u);
    if (rm > hw || (rm == hw && (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return bitcast<f32>(s | bitcast<u32>(f32(q) * bitcast<f32>(0x33800000u)));
}
";

const ROUND_BF16: &str = "\
// x rounded to the nearest bf16 value, ties to even, as f32; overflow gives inf, NaN stays NaN.
fn poot_round_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>((b | 0x400000u) & 0xffff0000u);
    }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
";

const MAX_F32: &str = "\
// IEEE 754-2019 maximum: NaN if either is NaN, +0 above -0.
fn poot_max_f32(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (a == b) {
        return bitcast<f32>(ua & ub);
    }
    return select(b, a, a > b);
}
";

const MIN_F32: &str = "\
// IEEE 754-2019 minimum: NaN if either is NaN, -0 below +0.
fn poot_min_f32(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (a == b) {
        return bitcast<f32>(ua | ub);
    }
    return select(b, a, a < b);
}
";

const F32_TO_I32: &str = "\
// Truncates toward zero and saturates; NaN gives 0.
fn poot_f32_to_i32(x: f32) -> i32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return 0i;
    }
    if (a >= 0x4f000000u) {
        return select(2147483647i, bitcast<i32>(0x80000000u), (b >> 31u) != 0u);
    }
    return i32(x);
}
";

const F32_TO_U32: &str = "\
// Truncates toward zero and saturates; NaN and negative values give 0.
fn poot_f32_to_u32(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u || (b >> 31u) != 0u) {
        return 0u;
    }
    if (a >= 0x4f800000u) {
        return 0xffffffffu;
    }
    return u32(x);
}
";

const F32_TO_BOOL: &str = "\
// x != 0, with NaN true and -0 false.
fn poot_f32_to_bool(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) != 0u;
}
";

const U32_TO_F32: &str = "\
// x rounded to the nearest f32, ties to even (WGSL leaves the direction open).
fn poot_u32_to_f32(x: u32) -> f32 {
    if (x < 0x1000000u) {
        return f32(x);
    }
    // Keep the top 24 bits, rounding on the sh dropped ones, then scale by 2^sh exactly.
    let sh = 8u - countLeadingZeros(x);
    var q = x >> sh;
    let rm = x & ((1u << sh) - 1u);
    let hw = 1u << (sh - 1u);
    if (rm > hw || (rm == hw && (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return f32(q) * bitcast<f32>((127u + sh) << 23u);
}
";

const I32_TO_F32: &str = "\
// x rounded to the nearest f32, ties to even (WGSL leaves the direction open).
fn poot_i32_to_f32(x: i32) -> f32 {
    let u = bitcast<u32>(x);
    let m = poot_u32_to_f32(select(u, 0u - u, x < 0i));
    return select(m, -m, x < 0i);
}
";

const DIV_I32: &str = "\
// Truncating division; a / 0 = a and i32 min / -1 = i32 min.
fn poot_div_i32(a: i32, b: i32) -> i32 {
    if (b == 0i) {
        return a;
    }
    if (b == -1i) {
        return bitcast<i32>(0u - bitcast<u32>(a));
    }
    return a / b;
}
";

const REM_I32: &str = "\
// Remainder with the dividend's sign; a % 0 = 0 and a % -1 = 0.
fn poot_rem_i32(a: i32, b: i32) -> i32 {
    if (b == 0i || b == -1i) {
        return 0i;
    }
    return a % b;
}
";

const DIV_U32: &str = "\
// Division; a / 0 = a.
fn poot_div_u32(a: u32, b: u32) -> u32 {
    if (b == 0u) {
        return a;
    }
    return a / b;
}
";

const REM_U32: &str = "\
// Remainder; a % 0 = 0.
fn poot_rem_u32(a: u32, b: u32) -> u32 {
    if (b == 0u) {
        return 0u;
    }
    return a % b;
}
";

const ERF: &str = "\
// erf(x): about 1 ulp plus the error of the platform's exp. Two minimax approximations
// (after N. Juffa): an odd polynomial below 0.927734375, 1 - exp(poly) above. |x| is clamped
// to 4, where erf already rounds to 1.
fn poot_erf(x: f32) -> f32 {
    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) {
        return x;
    }
    let t = min(abs(x), 4.0f);
    if (t > 0.927734375f) {
        let s = t * t;
        var r = fma(-1.72853470e-5f, t, 3.83197126e-4f);
        let u = fma(-3.88396438e-3f, t, 2.42546219e-2f);
        r = fma(r, s, u);
        r = fma(r, t, -1.06777877e-1f);
        r = fma(r, t, -6.34846687e-1f);
        r = fma(r, t, -1.28717512e-1f);
        r = fma(r, t, -t);
        r = 1.0f - exp(r);
        return bitcast<f32>(bitcast<u32>(r) | (bitcast<u32>(x) & 0x80000000u));
    }
    let s = x * x;
    var r = -5.96761703e-4f;
    r = fma(r, s, 4.99119423e-3f);
    r = fma(r, s, -2.67681349e-2f);
    r = fma(r, s, 1.12819925e-1f);
    r = fma(r, s, -3.76125336e-1f);
    r = fma(r, s, 1.28379166e-1f);
    return fma(r, x, x);
}
";

const POW: &str = "\
// C's powf: the special cases exactly, |x|^y from the platform's pow for the rest.
fn poot_pow(x: f32, y: f32) -> f32 {
    let bx = bitcast<u32>(x);
    let by = bitcast<u32>(y);
    let ax = bx & 0x7fffffffu;
    let ay = by & 0x7fffffffu;
    if (ay == 0u || bx == 0x3f800000u) {
        return 1.0f;
    }
    if (ax > 0x7f800000u || ay > 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    // From 2^24 on every f32 is an even integer (infinity counts as one here).
    let yabs = bitcast<f32>(ay);
    let y_int = ay >= 0x4b800000u || floor(yabs) == yabs;
    let y_odd = ay < 0x4b800000u && y_int && (u32(yabs) & 1u) == 1u;
    let x_neg = (bx >> 31u) != 0u;
    let y_neg = (by >> 31u) != 0u;
    if (x_neg && !y_int && ax != 0u && ax != 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    var m: f32;
    if (ay == 0x7f800000u) {
        if (ax == 0x3f800000u) {
            m = 1.0f;
        } else if ((ax < 0x3f800000u) != y_neg) {
            m = 0.0f;
        } else {
            m = bitcast<f32>(0x7f800000u);
        }
    } else if (ax == 0u) {
        m = select(0.0f, bitcast<f32>(0x7f800000u), y_neg);
    } else if (ax == 0x7f800000u) {
        m = select(bitcast<f32>(0x7f800000u), 0.0f, y_neg);
    } else {
        m = pow(bitcast<f32>(ax), y);
    }
    return select(m, -m, x_neg && y_odd);
}
";

const TANH: &str = "\
// tanh(x), with x clamped to +-15 (where tanh is 1 in f32) so no platform overflows inside.
fn poot_tanh(x: f32) -> f32 {
    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) {
        return x;
    }
    return tanh(clamp(x, -15.0f, 15.0f));
}
";

#[cfg(test)]
mod tests {
    use super::WgslLib;
    use crate::render::cuda_lib::CudaLib;

    /// The hexadecimal constants of a helper's source, in order, without suffixes.
    fn hex_constants(src: &str) -> Vec<String> {
        let mut out = Vec::new();
        let bytes = src.as_bytes();
        let mut i = 0;
        while i + 1 < bytes.len() {
            let boundary =
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            if boundary && bytes[i] == b'0' && bytes[i + 1] == b'x' {
                let end = (i + 2..bytes.len())
                    .find(|&j| !bytes[j].is_ascii_hexdigit())
                    .unwrap_or(bytes.len());
                out.push(src[i..end].to_string());
                i = end;
            } else {
                i += 1;
            }
        }
        out
    }

    /// The helpers both languages implement with the same bit-level algorithm use the same
    /// magic numbers in the same order (`F32ToI32` differs only in how it spells `i32::MIN`).
    /// `F16ToF32` differs on purpose: CUDA multiplies a subnormal f32 by 2^112, which WGSL may
    /// flush to zero, so WGSL keeps the integer path (each is checked against the oracle for
    /// every half: `cuda_lib`'s tests and the device suite).
    #[test]
    fn shared_helpers_use_the_same_constants() {
        let pairs = [
            (WgslLib::LoadBf16(0), CudaLib::LoadBf16),
            (WgslLib::RoundF16, CudaLib::RoundF16),
            (WgslLib::RoundBf16, CudaLib::RoundBf16),
            (WgslLib::MaxF32, CudaLib::MaxF32),
            (WgslLib::MinF32, CudaLib::MinF32),
            (WgslLib::F32ToU32, CudaLib::F32ToU32),
            (WgslLib::F32ToBool, CudaLib::F32ToBool),
        ];
        let params = ["p0_x".to_string()];
        for (w, c) in pairs {
            let (wh, ch) = (hex_constants(&w.source(&params)), hex_constants(c.source()));
            assert!(!wh.is_empty(), "{w:?}");
            assert_eq!(wh, ch, "{w:?} and {c:?} differ");
        }
    }
}
